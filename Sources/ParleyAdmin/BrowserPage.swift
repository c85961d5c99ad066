/// The page a person opens from an invite link (`/join#token=…`): plain HTML and JavaScript,
/// served as it is (no build step, no framework, nothing from another origin). The token stays
/// in the URL's fragment, which browsers never send, so it reaches no log; the page sends it
/// once, in the offer's Authorization header.
///
/// It asks for the microphone with the browser's own echo cancellation, noise suppression and
/// gain control, posts its offer (``BrowserWebServer``) with its microphone and
/// ``receiverSlots`` receivers besides (each plays one other member at a time, as the relay's
/// MID in each packet says), keeps the call's signalling socket open (``BrowserSignalling``:
/// events pushed, requests answered; opened again after a break, from the last event it saw),
/// plays each slot as its own track, and shows the roster: each member's state (a moderator's
/// mute named as such), a level meter with "speaking" from the audio levels the browser
/// measures (its own microphone's `media-source`; for the others, the level each packet
/// carries, from `getSynchronizationSources()`, else `getStats()`'s `inbound-rtp`, matched to
/// the roster's SSRCs), and a volume for each other member, applied to whichever slot carries
/// that member's SSRC now (`inbound-rtp`'s `mid`). It has mute (M), deafen (D), push-to-talk
/// (a toggle; Space held talks, and the page says when it is on and when it is talking), a
/// volume for the room, the room's texts (a log and a form), and,
/// when the token makes the member a moderator, server-mute and kick for each other member (the
/// relay checks the token, never the page). Every string from the network is put in with
/// `textContent`; the roster is updated in place, so a focused button keeps its focus. It says
/// plainly when the microphone is refused or the connection does not come up (UDP blocked).
/// In an end-to-end encrypted room it takes part as the `parley` client does (its identity in
/// IndexedDB, keys sealed with HPKE, frames sealed with SFrame in an `RTCRtpScriptTransform`
/// worker: ``BrowserEndToEndScripts``), shows each member's fingerprint and safety number,
/// refuses a changed key until the person accepts it, and warns of a member the relay hides;
/// a browser that cannot take part is refused by the relay, and the page says what it lacks.
/// With `&stats=1` in the fragment it writes its reception statistics to the console once a
/// second (the browser tests read them from Chromium's log); `&slots=N` offers fewer slots.
enum BrowserPage {
    /// Receivers the page offers besides its microphone: each other member's voice plays on one
    /// of its own, with its own volume; members who arrive while this many others are in the
    /// room share the microphone's section instead, at the room's volume.
    static let receiverSlots = 16

    /// Scripts and styles from this page only, inline; media and connections to this origin.
    static let contentSecurityPolicy =
        "default-src 'none'; script-src 'self' 'unsafe-inline'; worker-src 'self'; style-src 'unsafe-inline'; connect-src 'self'; media-src 'self' blob: mediastream:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

    static let html = #"""
    <!doctype html>
    <html lang="en">
    <head>
    <meta charset="utf-8">
    <meta name="viewport" content="width=device-width, initial-scale=1">
    <title>Parley</title>
    <style>
      body { font: 16px/1.4 system-ui, sans-serif; max-width: 46rem; margin: 1.5rem auto; padding: 0 1rem; color: #111; background: #fafafa; }
      h1 { font-size: 1.4rem; margin: 0 0 .5rem; }
      h2 { font-size: 1.1rem; margin: 1.2rem 0 .3rem; }
      #status { padding: .5rem .75rem; border-radius: .4rem; background: #e8ecf8; margin: .5rem 0; }
      #status.problem { background: #fbdada; }
      #talking { font-weight: 600; margin: .3rem 0; min-height: 1.4em; }
      #talking.live { color: #135f2a; }
      .controls { display: flex; flex-wrap: wrap; gap: .5rem; align-items: center; }
      ul, ol { list-style: none; padding: 0; margin: 0; }
      #roster li { padding: .4rem 0; border-bottom: 1px solid #ccc; display: grid; grid-template-columns: 1fr auto; gap: .2rem .8rem; align-items: center; }
      .who { font-weight: 600; }
      .state { color: #444; }
      .state.speaking { color: #135f2a; font-weight: 600; }
      .state.moderated { color: #8a1c1c; font-weight: 600; }
      meter { width: 7rem; height: .9rem; }
      .actions { grid-column: 1 / -1; display: flex; flex-wrap: wrap; gap: .4rem; align-items: center; }
      .actions button { font-size: .9rem; padding: .25rem .7rem; }
      .actions label { font-size: .9rem; display: flex; align-items: center; gap: .3rem; }
      .actions input[type=range] { width: 8rem; }
      #messages { max-height: 14rem; overflow-y: auto; border: 1px solid #ccc; border-radius: .4rem; background: #fff; padding: .3rem .6rem; min-height: 2.5rem; }
      #messages li { padding: .15rem 0; overflow-wrap: anywhere; }
      #messages .sender { font-weight: 600; }
      #messages .mine .sender { color: #1d4e9e; }
      form { display: flex; flex-wrap: wrap; gap: .3rem .5rem; margin-top: .5rem; }
      form label { flex-basis: 100%; }
      input[type=text] { flex: 1; font-size: 1rem; padding: .45rem; border: 1px solid #555; border-radius: .4rem; }
      button { font-size: 1rem; padding: .45rem 1rem; border-radius: .4rem; border: 1px solid #444; background: #fff; color: #111; cursor: pointer; }
      button:disabled { color: #666; border-color: #999; cursor: default; }
      button[aria-pressed="true"] { background: #b3261e; color: #fff; border-color: #b3261e; }
      button.danger { border-color: #b3261e; color: #8a1c1c; }
      :focus-visible { outline: 3px solid #1d4e9e; outline-offset: 2px; }
      .hint { color: #444; font-size: .9rem; }
      .keys { grid-column: 1 / -1; font-size: .85rem; color: #333; }
      .keys.warning { color: #8a1c1c; font-weight: 600; }
      #identity { font-size: .9rem; color: #333; margin: .2rem 0; }
    </style>
    </head>
    <body>
    <main>
      <h1 id="title">Parley</h1>
      <p id="status" role="status" aria-live="polite">Starting…</p>
      <div class="controls" role="group" aria-label="Your microphone and sound">
        <button id="mute" type="button" aria-pressed="false" aria-keyshortcuts="M" disabled>Mute</button>
        <button id="deafen" type="button" aria-pressed="false" aria-keyshortcuts="D" disabled>Deafen</button>
        <button id="ptt" type="button" aria-pressed="false" aria-describedby="talking" disabled>Push-to-talk</button>
        <label for="volume">Room volume</label>
        <input id="volume" type="range" min="0" max="100" value="100">
        <button id="leave" type="button" disabled>Leave</button>
      </div>
      <p id="talking" aria-live="polite"></p>
      <p id="identity" hidden></p>
      <p class="hint">Keys: M mutes, D deafens; with push-to-talk on, hold Space to talk.</p>
      <h2 id="roster-heading">In the room</h2>
      <ul id="roster" aria-labelledby="roster-heading"></ul>
      <h2 id="messages-heading">Messages</h2>
      <ol id="messages" role="log" aria-live="polite" aria-labelledby="messages-heading" tabindex="0"></ol>
      <form id="send">
        <label for="text">Message to the room</label>
        <input id="text" type="text" autocomplete="off" disabled>
        <button id="send-button" type="submit" disabled>Send</button>
      </form>
      <audio id="room" autoplay></audio>
      <div id="voices" hidden></div>
    </main>
    <script src="/parley-e2ee.js"></script>
    <script>
    "use strict";
    const fragment = new URLSearchParams(location.hash.slice(1));
    const token = fragment.get("token");
    const reportStats = fragment.get("stats") === "1";
    // `&slots=N` in the fragment offers fewer slots (the browser tests fill them with a few members).
    const receiverSlots = Math.min(\#(receiverSlots), Math.max(1, Math.floor(Number(fragment.get("slots")) || \#(receiverSlots))));
    const $ = id => document.getElementById(id);
    const statusLine = $("status"), talkingLine = $("talking"), rosterList = $("roster"), messageList = $("messages");
    const muteButton = $("mute"), deafenButton = $("deafen"), pttButton = $("ptt"), leaveButton = $("leave");
    const volumeSlider = $("volume"), textInput = $("text"), sendButton = $("send-button"), roomAudio = $("room");
    let resource = null, ended = false, me = null, isModerator = false, track = null, pc = null;
    // What the person chose; the microphone goes out only when all of it allows.
    let muted = false, deafened = false, pushToTalk = false, talking = false, serverMuted = false;
    // identity → its row's elements, kept so an update never takes focus from a button in it.
    const rows = new Map();
    let roster = [];
    // SSRC → [audio level 0…1, when it was measured], from getStats().
    const levels = new Map();
    // SSRC → [audio level 0…1, when it was seen, its RTP timestamp]: the level the speaker's
    // client wrote in its packets (getSynchronizationSources()), which no volume here changes.
    const sentLevels = new Map();
    // The receivers: mid → its <audio>; the microphone's section is the shared one (roomAudio),
    // which plays the voices beyond the slots.
    const players = new Map();
    let sharedMid = null;
    // SSRC → { mid, at }: the slot each voice arrived on last, and when; "SSRC/mid" → packets.
    const arrivals = new Map(), packetCounts = new Map();
    // identity → volume 0…1, as the person set it on that member's row.
    const volumes = new Map();

    function say(text, problem) {
      statusLine.textContent = text;
      statusLine.className = problem ? "problem" : "";
    }

    function element(tag, properties) {
      const node = document.createElement(tag);
      Object.assign(node, properties || {});
      return node;
    }

    function rowFor(member) {
      let row = rows.get(member.identity);
      if (row) return row;
      row = { item: element("li"), name: element("span", { className: "who" }), state: element("span", { className: "state" }),
              meter: element("meter", { min: 0, max: 1, low: 0.05, value: 0 }), actions: element("div", { className: "actions" }) };
      row.name.textContent = member.identity + (member.identity === me ? " (you)" : "");
      row.meter.setAttribute("aria-label", "Level of " + member.identity);
      const head = element("div");
      head.append(row.name, " ", row.state);
      // End-to-end encrypted rooms: the member's fingerprint, safety number and key state.
      row.keys = element("div", { className: "keys" });
      row.keys.hidden = true;
      row.item.append(head, row.meter, row.keys, row.actions);
      if (member.identity !== me) {
        // The voice's own volume: it follows the member to whichever slot carries them.
        row.volume = element("input", { type: "range", min: 0, max: 100, value: Math.round((volumes.get(member.identity) ?? 1) * 100) });
        row.volume.setAttribute("aria-label", "Volume of " + member.identity);
        row.volume.setAttribute("aria-valuetext", row.volume.value + " percent");
        row.volume.addEventListener("input", () => {
          volumes.set(member.identity, Number(row.volume.value) / 100);
          row.volume.setAttribute("aria-valuetext", row.volume.value + " percent");
          applyVolumes();
        });
        const label = element("label");
        label.append("Volume", row.volume);
        row.actions.append(label);
      }
      if (member.identity !== me && isModerator) {
        row.serverMute = element("button", { type: "button" });
        row.serverMute.addEventListener("click", () => moderate(row.serverMuted ? "server_unmute" : "server_mute", member.identity));
        row.kick = element("button", { type: "button", className: "danger" });
        row.kick.textContent = "Kick";
        row.kick.setAttribute("aria-label", "Kick " + member.identity + " from the room");
        // A kick keeps them out for a while: the first press asks, the second within 5 s kicks.
        const disarm = () => {
          row.kickArmed = false;
          row.kick.textContent = "Kick";
          row.kick.setAttribute("aria-label", "Kick " + member.identity + " from the room");
        };
        row.kick.addEventListener("click", () => {
          if (row.kickArmed) { disarm(); moderate("kick", member.identity); return; }
          row.kickArmed = true;
          row.kick.textContent = "Press again to kick " + member.identity;
          row.kick.setAttribute("aria-label", "Press again within 5 seconds to kick " + member.identity);
          setTimeout(() => { if (row.kickArmed) disarm(); }, 5000);
        });
        row.actions.append(row.serverMute, row.kick);
      }
      rows.set(member.identity, row);
      return row;
    }

    function showRoster(members) {
      roster = members;
      const present = new Set(members.map(member => member.identity));
      for (const [identity, row] of rows) if (!present.has(identity)) { row.item.remove(); rows.delete(identity); }
      for (const member of members) {
        const row = rowFor(member);
        row.serverMuted = member.serverMuted;
        if (row.serverMute) {
          row.serverMute.textContent = member.serverMuted ? "Unmute for the room" : "Mute for the room";
          row.serverMute.setAttribute("aria-label", (member.serverMuted ? "Let the room hear " : "Mute for the room: ") + member.identity);
        }
        // Moved only when out of place: moving an element takes the focus from a button in it.
        const index = members.indexOf(member);
        if (rosterList.children[index] !== row.item) rosterList.insertBefore(row.item, rosterList.children[index] || null);
      }
      if (e2ee) e2ee.roster(members);
      const mine = members.find(member => member.identity === me);
      const nowServerMuted = !!(mine && mine.serverMuted);
      if (nowServerMuted !== serverMuted) {
        serverMuted = nowServerMuted;
        say(serverMuted ? "A moderator muted you: the room does not hear you until a moderator lets it." : "A moderator unmuted you: the room hears you again.", serverMuted);
      }
      showLevels();
    }

    // Each member's state in words, and its level while it is heard: a moderator's mute is named
    // as such, never shown as silence.
    function showLevels() {
      const now = performance.now();
      for (const member of roster) {
        const row = rows.get(member.identity);
        if (!row) continue;
        const level = member.identity === me ? (micLive() ? (levels.get("mine") || [0, 0])[0] : 0) : levelOf(member.ssrc, now);
        const speaking = level > 0.03 && member.state === "live" && !member.serverMuted;
        let words;
        if (member.serverMuted) words = "muted by a moderator";
        else if (member.state === "deafened") words = "deafened";
        else if (member.state === "muted") words = "muted";
        else words = speaking ? "speaking" : "live";
        row.state.textContent = words;
        row.state.className = "state" + (member.serverMuted ? " moderated" : speaking ? " speaking" : "");
        row.meter.value = member.serverMuted || member.state !== "live" ? 0 : Math.min(1, level * 3);
      }
    }

    // A voice's level as its speaker sends it, whatever volume it plays at here: the level in its
    // packets, else what plays divided by the volume it plays at.
    function levelOf(ssrc, now) {
      const sent = sentLevels.get(ssrc);
      if (sent && now - sent[1] < 1000) return sent[0];
      const entry = levels.get(ssrc), arrival = arrivals.get(ssrc);
      if (!entry || now - entry[1] >= 1500) return 0;
      const player = arrival && players.get(arrival.mid);
      const gain = player ? (player.muted ? 0 : player.volume) : 1;
      return gain >= 0.05 ? Math.min(1, entry[0] / gain) : 0;
    }

    // The slot a voice plays on is the one its packets arrived on last.
    function slotOf(ssrc) { const arrival = arrivals.get(ssrc); return arrival ? arrival.mid : null; }

    // Each slot plays at the volume chosen for the member it carries now, times the room's;
    // the shared section at the room's. Deafened, nothing plays.
    function applyVolumes() {
      const room = Number(volumeSlider.value) / 100;
      const latest = new Map();
      for (const [ssrc, arrival] of arrivals) {
        const best = latest.get(arrival.mid);
        if (!best || arrival.at > best.at) latest.set(arrival.mid, { ssrc: ssrc, at: arrival.at });
      }
      for (const [mid, player] of players) {
        let volume = room;
        const current = latest.get(mid);
        const member = current && mid !== sharedMid ? roster.find(entry => entry.ssrc === current.ssrc) : null;
        if (member) volume *= volumes.get(member.identity) ?? 1;
        if (player.volume !== volume) player.volume = volume;
        player.muted = deafened;
      }
    }

    async function measureLevels() {
      if (!pc) return;
      const now = performance.now();
      (await pc.getStats()).forEach(entry => {
        if (entry.type === "media-source" && entry.kind === "audio" && entry.audioLevel !== undefined) levels.set("mine", [entry.audioLevel, now]);
        if (entry.type === "inbound-rtp" && entry.kind === "audio") {
          // A stream that stopped keeps its last figures in getStats() (so does a voice's old
          // stream on a slot it left): count it only while packets arrive.
          const key = entry.ssrc + "/" + entry.mid;
          if (packetCounts.get(key) === entry.packetsReceived) return;
          packetCounts.set(key, entry.packetsReceived);
          arrivals.set(entry.ssrc, { mid: entry.mid, at: now });
          if (entry.audioLevel !== undefined) levels.set(entry.ssrc, [entry.audioLevel, now]);
        }
      });
      for (const transceiver of pc.getTransceivers()) {
        for (const source of transceiver.receiver.getSynchronizationSources()) {
          // Listed for 10 s after its last packet: fresh only while its RTP timestamp moves.
          const previous = sentLevels.get(source.source);
          if (source.audioLevel !== undefined && (!previous || previous[2] !== source.rtpTimestamp)) {
            sentLevels.set(source.source, [source.audioLevel, now, source.rtpTimestamp]);
          }
        }
      }
      applyVolumes();
      showLevels();
    }

    function addMessage(sender, text, mine) {
      const item = element("li", { className: mine ? "mine" : "" });
      const who = element("span", { className: "sender" });
      who.textContent = sender + ": ";
      const words = element("span");
      words.textContent = text;
      item.append(who, words);
      messageList.append(item);
      while (messageList.children.length > 200) messageList.firstElementChild.remove();
      messageList.scrollTop = messageList.scrollHeight;
    }

    // The call's signalling: a WebSocket that proves itself with the call's key (offered as a
    // subprotocol: never in a URL), the relay's events pushed on it, the page's requests
    // answered on it. When it breaks, the call goes on; the page opens it again, asking from the
    // last event it saw.
    let signalKey = null, socket = null, nextEvent = 0, requestNumber = 0, retryDelay = 250, stateUnsent = false;
    const replies = new Map();

    function connect() {
      if (ended || !resource) return;
      const url = (location.protocol === "https:" ? "wss://" : "ws://") + location.host + resource + "/signal?after=" + nextEvent;
      const ws = new WebSocket(url, ["parley-signal.v1", "parley-key." + signalKey]);
      socket = ws;
      ws.onopen = () => {
        if (ws !== socket) return;
        if (retryDelay > 250) say(me ? "In the call as " + me + (isModerator ? ", a moderator." : ".") : "Connecting the audio…");
        retryDelay = 250;
        if (stateUnsent) sendState();
      };
      ws.onmessage = message => {
        if (ws !== socket) return;
        let event;
        try { event = JSON.parse(message.data); } catch (error) { return; }
        if (event.kind === "reply") {
          const settle = replies.get(event.id);
          replies.delete(event.id);
          if (settle) settle(event);
          return;
        }
        if (typeof event.index === "number") nextEvent = event.index + 1;
        handle(event);
      };
      ws.onclose = close => {
        if (ws !== socket) return;
        socket = null;
        for (const settle of replies.values()) settle({ status: 0, error: "the connection to the relay broke; try again" });
        replies.clear();
        // 4001: this page opened a newer socket; after "ended" the call is over.
        if (ended || close.code === 4001) return;
        if (pc && (pc.connectionState === "failed" || pc.connectionState === "closed")) {
          finish("The call ended: the relay stopped answering. Reload the page to join again.");
          return;
        }
        say("Lost the connection to the relay's web port; trying again…", true);
        setTimeout(connect, retryDelay);
        retryDelay = Math.min(retryDelay * 2, 5000);
      };
    }

    // A request to the relay, answered with { status, error } (statuses as HTTP's: 2xx done).
    function request(body) {
      return new Promise(resolve => {
        if (!socket || socket.readyState !== WebSocket.OPEN) {
          resolve({ status: 0, error: "the connection to the relay is down; trying again" });
          return;
        }
        const id = ++requestNumber;
        replies.set(id, resolve);
        socket.send(JSON.stringify(Object.assign({ id: id }, body)));
      });
    }

    function handle(event) {
      switch (event.kind) {
      case "joined":
        me = event.identity;
        isModerator = event.moderator === true;
        if (event.e2ee === true && identity) {
          e2ee = new EndToEnd(event.room);
          e2ee.showOwn();
        } else if (worker) worker.postMessage({ type: "mode", mode: "plain" });
        $("title").textContent = "Parley: " + event.room;
        say("Connecting the audio…");
        break;
      case "connected":
        say("In the call as " + me + (isModerator ? ", a moderator." : "."));
        for (const control of [muteButton, deafenButton, pttButton, textInput, sendButton]) control.disabled = false;
        break;
      case "roster": showRoster(event.roster); break;
      case "mediaKeys": if (e2ee) e2ee.received(event.keys || []); break;
      case "text": addMessage(event.identity, event.text, false); break;
      case "moderated": say(event.text); break;
      case "error": case "notice": say(event.text, true); break;
      case "ended": finish(event.text); break;
      case "missed": addMessage("Parley", event.text, false); break;
      }
    }

    function finish(text) {
      ended = true;
      say(text, true);
      talkingLine.textContent = "";
      for (const control of [muteButton, deafenButton, pttButton, leaveButton, textInput, sendButton]) control.disabled = true;
      for (const row of rows.values()) for (const button of [row.serverMute, row.kick]) if (button) button.disabled = true;
      if (pc) pc.close();
      if (track) track.stop();
    }

    function micLive() { return !muted && !deafened && (!pushToTalk || talking); }

    // The state goes to the relay as it changes, in order on the socket; a change made while
    // the socket is down goes when it is back.
    function sendState() {
      stateUnsent = !socket || socket.readyState !== WebSocket.OPEN;
      if (stateUnsent) return;
      request({ type: "state", muted: !micLive(), deafened: deafened }).then(reply => {
        if (reply.status === 0) stateUnsent = true;
        else if (reply.status >= 400 && reply.status !== 409) say("Could not tell the relay: " + reply.error, true);
      });
    }

    function apply() {
      if (track) track.enabled = micLive();
      applyVolumes();
      muteButton.setAttribute("aria-pressed", String(muted));
      muteButton.textContent = muted ? "Unmute" : "Mute";
      deafenButton.setAttribute("aria-pressed", String(deafened));
      deafenButton.textContent = deafened ? "Undeafen" : "Deafen";
      pttButton.setAttribute("aria-pressed", String(pushToTalk));
      talkingLine.className = pushToTalk && talking ? "live" : "";
      talkingLine.textContent = !pushToTalk ? "" : talking ? "Push-to-talk: talking" : "Push-to-talk is on: hold Space to talk";
      sendState();
      showLevels();
    }

    function setTalking(value) {
      if (talking === value) return;
      talking = value;
      apply();
    }

    async function sendText(text) {
      const reply = await request({ type: "text", text: text });
      return reply.status === 204 ? null : reply.error;
    }

    async function moderate(action, target) {
      const reply = await request({ type: "moderate", action: action, target: target });
      if (reply.status !== 202) say((reply.status ? "The relay refused: " : "Not sent: ") + reply.error, true);
    }

    async function stats() {
      const report = { packetsReceived: 0, totalAudioEnergy: 0, totalSamplesReceived: 0, concealedSamples: 0, packetsSent: 0 };
      if (!pc) return report;
      (await pc.getStats()).forEach(entry => {
        if (entry.type === "inbound-rtp" && entry.kind === "audio") {
          report.packetsReceived += entry.packetsReceived || 0;
          report.totalAudioEnergy += entry.totalAudioEnergy || 0;
          report.totalSamplesReceived += entry.totalSamplesReceived || 0;
          report.concealedSamples += entry.concealedSamples || 0;
        }
        if (entry.type === "outbound-rtp" && entry.kind === "audio") report.packetsSent += entry.packetsSent || 0;
      });
      return report;
    }
    window.parleyStats = stats;

    // Each voice as the page plays it, for the browser tests: its SSRC, the slot it arrived on,
    // the audio energy played so far (after the volume set here) and what its packets say.
    window.parleyVoices = async () => {
      const voices = [];
      if (!pc) return voices;
      (await pc.getStats()).forEach(entry => {
        if (entry.type !== "inbound-rtp" || entry.kind !== "audio") return;
        const member = roster.find(item => item.ssrc === entry.ssrc);
        voices.push({ ssrc: entry.ssrc, identity: member ? member.identity : null, mid: entry.mid || null, slot: slotOf(entry.ssrc),
                      packetsReceived: entry.packetsReceived || 0, totalAudioEnergy: entry.totalAudioEnergy || 0,
                      totalSamplesDuration: entry.totalSamplesDuration || 0, level: levelOf(entry.ssrc, performance.now()) });
      });
      return voices;
    };

    async function join() {
      if (!token) { say("This link has no token. Open the invite link you were given, all of it.", true); return; }
      let stream;
      try {
        stream = await navigator.mediaDevices.getUserMedia({ audio: { echoCancellation: true, noiseSuppression: true, autoGainControl: true } });
      } catch (error) {
        say("The microphone was refused (" + error.name + "). Allow it for this page in the browser's settings, then reload.", true);
        return;
      }
      track = stream.getAudioTracks()[0];
      const lacking = await endToEndSupport();
      pc = new RTCPeerConnection({ bundlePolicy: "max-bundle", rtcpMuxPolicy: "require" });
      const microphone = pc.addTransceiver(track, { direction: "sendrecv", streams: [stream] });
      // The slots: each plays one other member at a time, as the relay marks their packets, so
      // members come and go without an offer again.
      for (let slot = 0; slot < receiverSlots; slot++) pc.addTransceiver("audio", { direction: "recvonly" });
      if (!lacking) {
        // Every frame passes the worker, which sends nothing until the relay says whether the
        // room is end-to-end encrypted (plain if not; sealed once this page has a key if so).
        worker = new Worker("/parley-sframe-worker.js");
        microphone.sender.transform = new RTCRtpScriptTransform(worker, { side: "send" });
        for (const transceiver of pc.getTransceivers()) transceiver.receiver.transform = new RTCRtpScriptTransform(worker, { side: "receive" });
      }
      pc.ontrack = event => {
        const mid = event.transceiver.mid;
        let player = roomAudio;
        if (mid !== microphone.mid) {
          player = players.get(mid) || element("audio", { autoplay: true });
          $("voices").append(player);
        } else sharedMid = mid;
        players.set(mid, player);
        player.srcObject = new MediaStream([event.track]);
        player.play().catch(() => say("Click anywhere on the page to hear the room.", true));
        applyVolumes();
      };
      pc.oniceconnectionstatechange = () => {
        if (pc.iceConnectionState === "failed" && !ended) {
          say("The audio could not reach the relay: the network probably blocks UDP to it. Try another network, or ask whoever runs the relay.", true);
        }
      };
      const offer = await pc.createOffer();
      await pc.setLocalDescription(offer);
      say("Asking the relay to join…");
      const headers = { "Content-Type": "application/sdp", "Authorization": "Bearer " + token };
      if (identity) headers["Parley-Identity-Key"] = ParleyE2EE.base64url(identity.publicKey);
      const response = await fetch("/whip", { method: "POST", headers: headers, body: offer.sdp });
      if (response.status !== 201) {
        say("The relay refused: " + (await response.text()).trim() + (lacking ? " (this browser: " + lacking + ")" : ""), true);
        pc.close();
        track.stop();
        return;
      }
      resource = response.headers.get("Location");
      signalKey = response.headers.get("Parley-Signal-Key");
      const answer = await response.text();
      const red = /a=rtpmap:(\d+) red\/48000/i.exec(answer);
      if (worker && red) worker.postMessage({ type: "payloadTypes", red: Number(red[1]) });
      await pc.setRemoteDescription({ type: "answer", sdp: answer });
      leaveButton.disabled = false;
      connect();
      setInterval(() => measureLevels().catch(() => {}), 250);
      if (reportStats) setInterval(async () => console.log("parley-stats " + JSON.stringify(await stats())), 1000);
    }

    muteButton.addEventListener("click", () => { muted = !muted; apply(); });
    deafenButton.addEventListener("click", () => { deafened = !deafened; apply(); });
    pttButton.addEventListener("click", () => { pushToTalk = !pushToTalk; talking = false; apply(); });
    volumeSlider.addEventListener("input", applyVolumes);
    volumeSlider.setAttribute("aria-valuetext", "100 percent");
    volumeSlider.addEventListener("change", () => volumeSlider.setAttribute("aria-valuetext", volumeSlider.value + " percent"));
    leaveButton.addEventListener("click", async () => {
      if (resource) await fetch(resource, { method: "DELETE", headers: { "Authorization": "Bearer " + signalKey } }).catch(() => {});
      finish("You left the call.");
    });
    $("send").addEventListener("submit", async event => {
      event.preventDefault();
      const text = textInput.value;
      if (!text.trim() || !resource) return;
      const problem = await sendText(text);
      if (problem) { say("Not sent: " + problem, true); return; }
      addMessage(me + " (you)", text, true);
      textInput.value = "";
    });

    // Keys act unless the person is typing; Space held talks while push-to-talk is on (and is
    // then taken from whichever button has focus, so it never presses one by accident).
    function typing(target) { return target instanceof HTMLInputElement && target.type === "text"; }
    document.addEventListener("keydown", event => {
      if (typing(event.target) || event.ctrlKey || event.altKey || event.metaKey || ended) return;
      if (event.code === "Space" && pushToTalk) { event.preventDefault(); if (!event.repeat) setTalking(true); return; }
      if (event.repeat || muteButton.disabled) return;
      const key = event.key.toLowerCase();
      if (key === "m") { muted = !muted; apply(); }
      if (key === "d") { deafened = !deafened; apply(); }
    });
    document.addEventListener("keyup", event => {
      if (event.code === "Space" && pushToTalk && !typing(event.target)) { event.preventDefault(); setTalking(false); }
    });
    // A window that loses focus never hears the Space key come up: stop talking then.
    window.addEventListener("blur", () => setTalking(false));
    // MARK: End-to-end encryption (rooms made with --e2ee)
    //
    // This page's identity is an X25519 key pair made with WebCrypto on first use and kept in
    // this origin's IndexedDB, its private half not extractable (script can use it, not read
    // it). Its public half goes with the offer; the relay repeats it in the roster, and every
    // member seals its media key to it (HPKE), as to a parley client's. Each other member's key
    // is pinned for its name in the room on first sight (localStorage); a different key later
    // is refused until the person here accepts it. Frames are sealed and opened in the worker.
    let identity = null, worker = null, e2ee = null;

    // What this browser lacks to take part, in words, or null when it can.
    async function endToEndSupport() {
      if (typeof RTCRtpScriptTransform === "undefined") return "it has no RTCRtpScriptTransform";
      if (typeof ParleyE2EE === "undefined" || !window.crypto || !crypto.subtle) return "it has no WebCrypto";
      try {
        identity = await loadIdentity();
      } catch (error) {
        identity = null;
        return "it could not make or keep an X25519 identity key (" + error.message + ")";
      }
      return null;
    }

    function keyStore(action) {
      return new Promise((resolve, reject) => {
        const opening = indexedDB.open("parley", 1);
        opening.onupgradeneeded = () => opening.result.createObjectStore("identity");
        opening.onerror = () => reject(opening.error);
        opening.onsuccess = () => {
          const store = opening.result.transaction("identity", "readwrite").objectStore("identity");
          const request = action(store);
          request.onsuccess = () => resolve(request.result);
          request.onerror = () => reject(request.error);
        };
      });
    }

    async function loadIdentity() {
      let pair = await keyStore(store => store.get("x25519"));
      if (!pair) {
        pair = await crypto.subtle.generateKey({ name: "X25519" }, false, ["deriveBits"]);
        await keyStore(store => store.put(pair, "x25519"));
      }
      return { privateKey: pair.privateKey, publicKey: await ParleyE2EE.publicBytes(pair.publicKey) };
    }

    function loadPins() { try { return JSON.parse(localStorage.getItem("parley-pins") || "{}"); } catch (error) { return {}; } }
    function savePins(pins) { try { localStorage.setItem("parley-pins", JSON.stringify(pins)); } catch (error) {} }

    // How long the keys of someone who left are kept (the client's departedKeyNanoseconds).
    const departedKeyMilliseconds = 10000;

    // The call's keys, as EndToEndSession is for the parley client: the roster gives the
    // members and their keys (checked against the pins); those trusted are given our key (a
    // ratchet on a join, a fresh epoch on a departure); keys from others are opened and handed
    // to the worker, and forgotten 10 s after their person left; each package's view of the
    // room is checked against ours.
    class EndToEnd {
      constructor(room) {
        this.room = room;
        this.schedule = new ParleyE2EE.KeySchedule();
        this.members = new Map();     // ssrc → { identity, key (bytes), keyText, person, verdict, takesPart }
        this.unplaced = [];           // [{ entry, at }]: keys whose sender no roster named yet
        this.refused = new Map();     // person → entries held while its changed key is not accepted
        this.views = [];              // [{ digest (hex), count, until }]
        this.differing = new Map();   // person → { digest, count, since }
        this.alarmed = new Map();     // identity → text
        this.keyed = new Set();       // people whose keys the worker holds
        this.leaving = new Map();     // person no longer in the room → when their keys are forgotten
        this.shown = new Map();       // key text → { fingerprint, safetyNumber }
        this.rejected = 0;
        this.work = Promise.resolve();
        this.publishedKeyID = null;
        this.unsent = [];
        this.publish(this.schedule.current);
        setInterval(() => this.queue(() => this.tick()), 100);
      }

      queue(job) { this.work = this.work.then(job).catch(error => console.log("parley-e2ee " + error.message)); return this.work; }

      publish(key) {
        const keyID = ParleyE2EE.keyIDOf(key);
        if (this.publishedKeyID === keyID) return;
        this.publishedKeyID = keyID;
        worker.postMessage({ type: "sendKey", key: key });
      }

      async showOwn() {
        const line = $("identity");
        line.hidden = false;
        line.textContent = "This room is end-to-end encrypted: only its members hold the keys to its voices. Your key's fingerprint: "
          + await ParleyE2EE.fingerprint(identity.publicKey) + ".";
      }

      roster(entries) {
        const copy = entries.map(entry => Object.assign({}, entry));
        this.queue(() => this.rosterChanged(copy));
      }

      async rosterChanged(entries) {
        const now = performance.now();
        const pins = loadPins();
        let pinsChanged = false;
        const next = new Map();
        const everyone = [];
        for (const entry of entries) {
          const key = entry.identityKey ? ParleyE2EE.fromBase64url(entry.identityKey) : null;
          everyone.push({ identity: entry.identity, identityKey: key || new Uint8Array(0) });
          if (entry.identity === me) { this.selfSSRC = entry.ssrc; continue; }
          const takesPart = entry.e2ee === true && key !== null && key.length === 32;
          const member = { identity: entry.identity, key: key, keyText: entry.identityKey || "", ssrc: entry.ssrc,
                           person: entry.identity + "	" + (entry.identityKey || ""), takesPart: takesPart, verdict: "none" };
          const known = this.members.get(entry.ssrc);
          if (known && known.person === member.person) member.verdict = known.verdict;
          else if (takesPart) {
            const slot = this.room + "	" + entry.identity, pin = pins[slot];
            if (!pin) { pins[slot] = { key: entry.identityKey, since: Math.floor(Date.now() / 1000) }; pinsChanged = true; member.verdict = "new"; }
            else member.verdict = pin.key === entry.identityKey ? "known" : "changed";
          }
          next.set(entry.ssrc, member);
        }
        if (pinsChanged) savePins(pins);
        this.members = next;
        this.sendStreams();
        // Someone who left keeps their keys 10 s, so their last frames still play, and is then
        // forgotten, as the client does; one back within that keeps them (keys are a person's:
        // their name and identity key, not their SSRC).
        const present = new Set([...next.values()].map(member => member.person));
        for (const person of new Set([...this.keyed, ...this.refused.keys(), ...this.differing.keys()])) {
          if (!present.has(person) && !this.leaving.has(person)) this.leaving.set(person, now + departedKeyMilliseconds);
        }
        for (const person of present) this.leaving.delete(person);
        const waiting = this.unplaced;
        this.unplaced = [];
        for (const item of waiting) if (now - item.at < 5000) await this.receive(item.entry, item.at);
        const digest = ParleyE2EE.hex(await ParleyE2EE.roomViewDigest(this.room, everyone));
        const last = this.views[this.views.length - 1];
        if (!last || last.digest !== digest) {
          if (last) last.until = now;
          this.views.push({ digest: digest, count: everyone.length, until: null });
          this.views = this.views.filter(view => view.until === null || now - view.until <= 10000);
        }
        this.view = { digest: ParleyE2EE.fromHex(digest), count: everyone.length };
        await this.deliver(await this.schedule.recipientsChanged(this.recipients(), now));
        this.show();
      }

      trusted(member) { return member.takesPart && (member.verdict === "new" || member.verdict === "known"); }

      recipients() {
        return [...this.members.values()].filter(member => this.trusted(member)).sort((a, b) => a.ssrc - b.ssrc)
          .map(member => ({ person: member.person, identity: member.identity, identityKey: member.key, ssrc: member.ssrc }));
      }

      // The worker plays the frames of trusted members' streams only.
      sendStreams() {
        worker.postMessage({ type: "streams", streams: [...this.members.values()].filter(member => this.trusted(member)).map(member => [member.ssrc, member.person]) });
      }

      // Seals each delivery to its recipient and sends them to the relay, which routes them unread.
      async deliver(deliveries) {
        this.publish(this.schedule.current);
        if (!this.view) return;
        for (const delivery of deliveries) {
          const sealed = await ParleyE2EE.sealPackage(
            { keyID: ParleyE2EE.keyIDOf(delivery.key), baseKey: delivery.key.baseKey, memberCount: Math.min(65535, this.view.count), digest: this.view.digest },
            delivery.recipient.identityKey, delivery.recipient.identity, identity, me, this.room);
          this.unsent.push({ ssrc: delivery.recipient.ssrc, package: ParleyE2EE.base64url(sealed) });
        }
        await this.flush();
      }

      // Keys go in requests of at most 32; a request the relay did not take (the socket was
      // down) goes again at the next tick.
      async flush() {
        while (this.unsent.length) {
          const batch = this.unsent.slice(0, 32);
          const reply = await request({ type: "mediaKeys", keys: batch });
          if (reply.status === 0 || reply.status === 409 || reply.status === 429) return;
          this.unsent.splice(0, batch.length);
          if (reply.status >= 400) console.log("parley-e2ee the relay refused media keys: " + reply.error);
        }
      }

      received(entries) {
        const now = performance.now();
        const copy = entries.slice(0, 64);
        this.queue(async () => { for (const entry of copy) await this.receive(entry, now); this.show(); });
      }

      async receive(entry, at) {
        const sender = this.members.get(entry.ssrc);
        if (!sender) {
          if (this.unplaced.length >= 64) this.unplaced.shift();
          this.unplaced.push({ entry: entry, at: at });
          return;
        }
        if (sender.takesPart && sender.verdict === "changed") {
          const kept = this.refused.get(sender.person) || [];
          if (kept.length >= 8) kept.shift();
          kept.push(entry);
          this.refused.set(sender.person, kept);
          return;
        }
        const sealed = ParleyE2EE.fromBase64url(entry.package);
        const opened = sealed && this.trusted(sender) && await ParleyE2EE.openPackage(sealed, identity, me, sender.key, sender.identity, this.room);
        if (!opened) { this.rejected++; return; }
        worker.postMessage({ type: "install", person: sender.person,
                             key: { epoch: Math.floor(opened.keyID / 16), generation: opened.keyID % 16, baseKey: opened.baseKey } });
        this.keyed.add(sender.person);
        this.checkView(sender, ParleyE2EE.hex(opened.digest), opened.memberCount, performance.now());
      }

      checkView(sender, digest, count, now) {
        const matches = this.views.some(view => view.digest === digest && (view.until === null || now - view.until <= 10000));
        if (matches) {
          this.differing.delete(sender.person);
          if (this.alarmed.delete(sender.identity)) say(sender.identity + "'s view of the room matches yours again.");
        } else if (!this.differing.has(sender.person) || this.differing.get(sender.person).digest !== digest) {
          const since = this.differing.has(sender.person) ? this.differing.get(sender.person).since : now;
          this.differing.set(sender.person, { digest: digest, count: count, since: since });
        }
      }

      async tick() {
        const now = performance.now();
        const next = this.schedule.tick(now);
        if (next) this.publish(next);
        if (this.unsent.length) await this.flush();
        for (const [person, until] of this.leaving) {
          if (now < until) continue;
          this.leaving.delete(person);
          this.keyed.delete(person);
          this.refused.delete(person);
          this.differing.delete(person);
          worker.postMessage({ type: "forget", person: person });
        }
        const ours = this.views.length ? this.views[this.views.length - 1].count : 0;
        let changed = false;
        for (const [person, difference] of this.differing) {
          if (now - difference.since < 3000) continue;
          if (this.views.some(view => view.digest === difference.digest)) { this.differing.delete(person); continue; }
          const name = person.split("	")[0];
          if (!this.alarmed.has(name)) {
            const text = "gave their key to a room of " + difference.count + " where you see " + ours;
            this.alarmed.set(name, text);
            say("Warning: " + name + " " + text + ": someone you cannot see may be listening.", true);
            changed = true;
          }
        }
        if (changed) this.show();
      }

      // The person accepted a member's changed key (after comparing the safety number).
      accept(identityName) {
        this.queue(async () => {
          const member = [...this.members.values()].find(item => item.identity === identityName);
          if (!member || !member.takesPart) return;
          const pins = loadPins();
          pins[this.room + "	" + identityName] = { key: member.keyText, since: Math.floor(Date.now() / 1000) };
          savePins(pins);
          member.verdict = "known";
          this.sendStreams();
          for (const entry of this.refused.get(member.person) || []) await this.receive(entry, performance.now());
          this.refused.delete(member.person);
          await this.deliver(await this.schedule.recipientsChanged(this.recipients(), performance.now()));
          this.show();
        });
      }

      async shownKey(keyText, key) {
        if (!this.shown.has(keyText)) {
          if (this.shown.size >= 256) this.shown.clear();
          this.shown.set(keyText, { fingerprint: await ParleyE2EE.fingerprint(key), safetyNumber: await ParleyE2EE.safetyNumber(identity.publicKey, key) });
        }
        return this.shown.get(keyText);
      }

      // Each row: the fingerprint, the safety number to read aloud, the key's state, the alarm.
      async show() {
        for (const member of this.members.values()) {
          const row = rows.get(member.identity);
          if (!row) continue;
          row.keys.hidden = false;
          let words, warning = false;
          if (!member.takesPart) { words = "cannot take part in end-to-end encryption: hears nothing, and nothing of theirs plays"; warning = true; }
          else {
            const shown = await this.shownKey(member.keyText, member.key);
            const state = member.verdict === "new" ? "key new to you" : member.verdict === "known" ? "key known" : "KEY CHANGED: refused until you accept it";
            warning = member.verdict === "changed";
            words = "Key " + shown.fingerprint + " (" + state + "). Safety number: " + shown.safetyNumber;
            row.keys.setAttribute("data-safety-number", shown.safetyNumber);
            row.keys.setAttribute("data-fingerprint", shown.fingerprint);
          }
          const alarm = this.alarmed.get(member.identity);
          if (alarm) { words += ". Warning: " + alarm; warning = true; }
          row.keys.textContent = words;
          row.keys.className = "keys" + (warning ? " warning" : "");
          if (member.verdict === "changed") {
            const accept = element("button", { type: "button" });
            accept.className = "accept-key";
            accept.textContent = "Accept " + member.identity + "'s new key";
            accept.addEventListener("click", () => this.accept(member.identity));
            row.keys.append(" ", accept);
          }
        }
      }

      status() {
        return { keyID: this.publishedKeyID, rejected: this.rejected,
                 members: [...this.members.values()].map(member => ({ identity: member.identity, verdict: member.verdict, holdsTheirs: this.keyed.has(member.person),
                   safetyNumber: this.shown.has(member.keyText) ? this.shown.get(member.keyText).safetyNumber : null, alarm: this.alarmed.get(member.identity) || null })) };
      }
    }

    // The call's end-to-end state and the worker's counts, for the browser tests.
    window.parleyEndToEnd = async () => {
      if (!e2ee) return null;
      const counts = await new Promise(resolve => {
        const listener = event => { if (event.data && event.data.type === "counts") { worker.removeEventListener("message", listener); resolve(event.data.counts); } };
        worker.addEventListener("message", listener);
        worker.postMessage({ type: "counts" });
      });
      return Object.assign(e2ee.status(), { frames: counts });
    };

    join().catch(error => say("Something went wrong: " + error.message, true));
    </script>
    </body>
    </html>
    """#
}
