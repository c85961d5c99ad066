/// The page a person opens from an invite link (`/join#token=…`): plain HTML and JavaScript,
/// served as it is (no build step, no framework, nothing from another origin). The token stays
/// in the URL's fragment, which browsers never send, so it reaches no log; the page sends it
/// once, in the offer's Authorization header.
///
/// It asks for the microphone with the browser's own echo cancellation, noise suppression and
/// gain control, posts its offer (``BrowserWebServer``), plays the room, shows the roster with
/// each member's state, and has a mute button (also the M key). It says plainly when the
/// microphone is refused or the connection does not come up (UDP blocked). With `&stats=1` in
/// the fragment it writes its reception statistics to the console once a second (the browser
/// test reads them from Chromium's log).
enum BrowserPage {
    /// Scripts and styles from this page only, inline; media and connections to this origin.
    static let contentSecurityPolicy =
        "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; media-src 'self' blob: mediastream:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

    static let html = #"""
    <!doctype html>
    <html lang="en">
    <head>
    <meta charset="utf-8">
    <meta name="viewport" content="width=device-width, initial-scale=1">
    <title>Parley</title>
    <style>
      body { font: 16px/1.4 system-ui, sans-serif; max-width: 36rem; margin: 2rem auto; padding: 0 1rem; color: #111; background: #fafafa; }
      h1 { font-size: 1.4rem; margin: 0 0 .5rem; }
      #status { padding: .5rem .75rem; border-radius: .4rem; background: #eef; }
      #status.problem { background: #fdd; }
      ul { list-style: none; padding: 0; }
      li { padding: .3rem 0; border-bottom: 1px solid #ddd; display: flex; justify-content: space-between; }
      .state { color: #555; }
      button { font-size: 1rem; padding: .5rem 1.2rem; border-radius: .4rem; border: 1px solid #555; background: #fff; cursor: pointer; }
      button[aria-pressed="true"] { background: #c33; color: #fff; border-color: #c33; }
      button:focus-visible { outline: 3px solid #36c; outline-offset: 2px; }
    </style>
    </head>
    <body>
    <main>
      <h1 id="title">Parley</h1>
      <p id="status" role="status" aria-live="polite">Starting…</p>
      <p><button id="mute" type="button" aria-pressed="false" disabled>Mute</button>
         <button id="leave" type="button" disabled>Leave</button></p>
      <h2 id="roster-heading">In the room</h2>
      <ul id="roster" aria-labelledby="roster-heading"></ul>
      <audio id="room" autoplay></audio>
    </main>
    <script>
    "use strict";
    const fragment = new URLSearchParams(location.hash.slice(1));
    const token = fragment.get("token");
    const reportStats = fragment.get("stats") === "1";
    const statusLine = document.getElementById("status");
    const muteButton = document.getElementById("mute");
    const leaveButton = document.getElementById("leave");
    const rosterList = document.getElementById("roster");
    let resource = null, nextEvent = 0, ended = false, muted = false, me = null, track = null, pc = null;

    function say(text, problem) {
      statusLine.textContent = text;
      statusLine.className = problem ? "problem" : "";
    }

    function showRoster(members) {
      rosterList.replaceChildren(...members.map(member => {
        const item = document.createElement("li");
        const name = document.createElement("span");
        name.textContent = member.identity + (member.identity === me ? " (you)" : "");
        const state = document.createElement("span");
        state.className = "state";
        state.textContent = member.serverMuted ? "muted by a moderator" : member.state;
        item.append(name, state);
        return item;
      }));
    }

    async function poll() {
      while (resource && !ended) {
        try {
          const response = await fetch(resource + "/events?after=" + nextEvent, { cache: "no-store" });
          if (response.status === 404) { finish("The call ended. Reload the page to join again."); break; }
          const answer = await response.json();
          nextEvent = answer.next;
          for (const event of answer.events) handle(event);
        } catch (error) {
          say("Lost the relay's web port (" + error.message + "); retrying…", true);
        }
        await new Promise(resolve => setTimeout(resolve, 500));
      }
    }

    function handle(event) {
      switch (event.kind) {
      case "joined":
        me = event.identity;
        document.getElementById("title").textContent = "Parley: " + event.room;
        say("Connecting the audio…");
        break;
      case "connected":
        say("In the call as " + me + ".");
        muteButton.disabled = false;
        break;
      case "roster": showRoster(event.roster); break;
      case "text": say(event.identity + ": " + event.text); break;
      case "error": case "notice": say(event.text, true); break;
      case "ended": finish(event.text); break;
      }
    }

    function finish(text) {
      ended = true;
      say(text, true);
      muteButton.disabled = true;
      leaveButton.disabled = true;
      if (pc) pc.close();
      if (track) track.stop();
    }

    async function setMuted(value) {
      muted = value;
      track.enabled = !muted;
      muteButton.setAttribute("aria-pressed", String(muted));
      muteButton.textContent = muted ? "Unmute" : "Mute";
      await fetch(resource + "/state", { method: "POST", headers: { "Content-Type": "application/json" },
                                         body: JSON.stringify({ muted: muted, deafened: false }) });
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
      pc = new RTCPeerConnection({ bundlePolicy: "max-bundle", rtcpMuxPolicy: "require" });
      pc.addTransceiver(track, { direction: "sendrecv", streams: [stream] });
      pc.ontrack = event => {
        const room = document.getElementById("room");
        room.srcObject = event.streams[0] || new MediaStream([event.track]);
        room.play().catch(() => say("Click anywhere on the page to hear the room.", true));
      };
      pc.oniceconnectionstatechange = () => {
        if (pc.iceConnectionState === "failed" && !ended) {
          say("The audio could not reach the relay: the network probably blocks UDP to it. Try another network, or ask whoever runs the relay.", true);
        }
      };
      const offer = await pc.createOffer();
      await pc.setLocalDescription(offer);
      say("Asking the relay to join…");
      const response = await fetch("/whip", { method: "POST", headers: { "Content-Type": "application/sdp", "Authorization": "Bearer " + token }, body: offer.sdp });
      if (response.status !== 201) {
        say("The relay refused: " + (await response.text()).trim(), true);
        pc.close();
        track.stop();
        return;
      }
      resource = response.headers.get("Location");
      await pc.setRemoteDescription({ type: "answer", sdp: await response.text() });
      leaveButton.disabled = false;
      poll();
      if (reportStats) setInterval(async () => console.log("parley-stats " + JSON.stringify(await stats())), 1000);
    }

    muteButton.addEventListener("click", () => setMuted(!muted));
    leaveButton.addEventListener("click", async () => {
      if (resource) await fetch(resource, { method: "DELETE" });
      finish("You left the call.");
    });
    document.addEventListener("keydown", event => {
      if (event.key.toLowerCase() === "m" && !muteButton.disabled && event.target === document.body) setMuted(!muted);
    });
    join().catch(error => say("Something went wrong: " + error.message, true));
    </script>
    </body>
    </html>
    """#
}
