"""A browser member in a room of five, measured: Debian's headless Chromium joins through the
relay's page (`parley-relay serve --web`), four `parley call`s fed from speech files join the
same room, and the run measures what each side hears of the other.

Two runs, each a fresh relay:

- **clean**: the four `parley` talkers take turns (one voice at a time), the browser reads its
  own speech. Mouth-to-ear delay from a `parley` talker to the browser, from the browser to
  a `parley` listener, and between two `parley` clients for comparison, each by
  `parley-bench call-quality` (the talker's input against the listener's recording, both
  placed on CLOCK_MONOTONIC).
- **loss**: every voice talks all the time (so neither side's share is diluted by pauses),
  and `parley netsim` loses a share of the packets on the way from the relay to two
  listeners, the browser and one `parley` client (`--down loss=N%`, random, seeded). The relay
  tells the browser the proxy's address as its ICE candidate (`--public-address`, as a relay
  behind a NAT or a port forward would). Compared: the browser's `concealedSamples /
  totalSamplesReceived` (getStats inbound-rtp, over every voice it receives) against the
  `parley` listener's concealed share (its `--stats-json` speakers: concealed frames over
  the frames that were due), and the other `parley` clients' on the clean path.

How the browser's side is timed. The page is driven through the DevTools protocol over
`--remote-debugging-pipe`. A recorder is put into the page from outside (the page itself is
unchanged): an AudioContext at 48 kHz takes every received track (what the room sounds like
in the page) on channel 0 and the page's microphone track as it is sent (after the browser's
capture processing) on channel 1, into a ScriptProcessorNode that keeps each block with its
`playbackTime`. A 20 ms tone scheduled at a known context time on channel 2 fixes where each
block's samples sit on the context's timeline; the context's clock is tied to
`performance.timeOrigin + performance.now()` (the wall clock) by pairs of `currentTime` and
`performance.now()` read every 20 ms (the earliest reading of each `currentTime` is when that
audio was rendered), and the wall clock to CLOCK_MONOTONIC here. So the browser's "ear" is
its audio graph rendering the received voice, and its "mouth" is the same graph taking its
microphone track: the audio device's buffers are counted on neither side, as for `parley`
(whose origins are the first sample read and the first handed to the device). Both taps go
through WebAudio's FIFO for a MediaStreamTrack, which makes the browser's ear and its mouth
late by the same amount: the round trip (parley → browser → parley) does not depend on it,
and the one-way figures are corrected by that FIFO's delay, measured in the page (the timing
tone also goes through a MediaStreamTrack and back into the recorder on a fourth channel).

Usage: browser_room.py --bin DIR --out DIR [--loss 10] [--seed 42] [--seconds 40]
"""
import argparse
import base64
import fcntl
import json
import os
import select
import socket
import statistics
import struct
import subprocess
import sys
import time
import wave

RATE = 48000
PARLEY_TALKERS = ["bob", "cy", "dee", "eve"]
BROWSER = "ada"
VOICES = {"ada": "en+f3", "bob": "en-us", "cy": "en-gb-scotland", "dee": "en+f4", "eve": "en-us+m3"}
LINES = [
    "Good morning everyone. Shall we start with the numbers from last week?",
    "Yes. Sales went up by twelve percent, mostly from the new customers in the north.",
    "That matches what I saw. I will send the full report on Thursday morning.",
    "Great news, thank you both. What about the delivery delays?",
    "Two trucks were late on Monday, because of the snow. It is fixed now.",
    "Then let us meet again next week at noon, and bring your umbrellas.",
    "The new office opens in March, and there is room for twelve more desks.",
    "Please check the budget before Friday, the numbers must be final by then.",
    "I spoke to the supplier this morning, and the prices stay the same this year.",
    "Can somebody take the notes today? I have to leave a little early.",
]


def fail(message):
    print(f"browser-room: {message}", file=sys.stderr)
    sys.exit(1)


# --- Speech --------------------------------------------------------------------------------

def read_wav(path):
    with wave.open(path) as w:
        assert w.getsampwidth() == 2 and w.getnchannels() == 1, path
        return w.getframerate(), list(struct.unpack(f"<{w.getnframes()}h", w.readframes(w.getnframes())))


def write_wav(path, samples, rate=RATE):
    with wave.open(path, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(struct.pack(f"<{len(samples)}h", *samples))


def make_speech(folder, seconds, turns_seconds):
    """Per voice: `turns.wav` (the parley talkers take turns, one line each in order, then
    again; silence in between; every turn ends within `turns_seconds`, 2 s before the calls
    end, so that every turn a talker had was also heard) and `talking.wav` (the voice's lines
    back to back, 0.2 s apart, for `seconds`). All at espeak-ng's rate (22.05 kHz); the calls
    resample."""
    lines_folder = os.path.join(folder, "lines")
    os.makedirs(lines_folder, exist_ok=True)
    lines = {}
    rate = None
    for name, voice in VOICES.items():
        for index, text in enumerate(LINES):
            path = os.path.join(lines_folder, f"{name}-{index}.wav")
            if not os.path.exists(path):
                subprocess.run(["espeak-ng", "-v", voice, "-s", "165", "-w", path, text], check=True)
            rate, lines[(name, index)] = read_wav(path)
    length = int(seconds * rate)
    gap = int(0.2 * rate)
    for name in VOICES:
        talking = []
        index = list(VOICES).index(name)
        while len(talking) < length:
            talking += lines[(name, index % len(LINES))] + [0] * gap
            index += 1
        write_wav(os.path.join(folder, f"{name}-talking.wav"), talking[:length], rate)
    # Turns: bob, cy, dee, eve, one line each, 0.6 s apart, from 1 s in, until the turns end.
    # (Turns the calls never got to, past their --duration, would count as dropouts of the
    # talker in every listener's recording.)
    turns_length = int(turns_seconds * rate)
    tracks = {name: [0] * length for name in PARLEY_TALKERS}
    position, turn = rate, 0
    while True:
        name = PARLEY_TALKERS[turn % len(PARLEY_TALKERS)]
        line = lines[(name, turn % len(LINES))]
        if position + len(line) > turns_length:
            break
        tracks[name][position:position + len(line)] = line
        position += len(line) + int(0.6 * rate)
        turn += 1
    for name, samples in tracks.items():
        write_wav(os.path.join(folder, f"{name}-turns.wav"), samples, rate)


# --- Chromium, driven through the DevTools protocol -----------------------------------------

class Chromium:
    """Headless Chromium with the page open, its microphone a WAV file (looped); commands on
    its fd 3 and answers on its fd 4 (`--remote-debugging-pipe`), JSON ending in a NUL."""

    def __init__(self, chromium, url, speech, folder):
        self.log_path = os.path.join(folder, "chromium.log")
        to_chromium = os.pipe()
        from_chromium = os.pipe()
        child_ends = (to_chromium[0], from_chromium[1])

        def arrange():
            # Move the child's ends out of the way first, then onto 3 and 4.
            high = [fcntl.fcntl(fd, fcntl.F_DUPFD, 20) for fd in child_ends]
            os.dup2(high[0], 3)
            os.dup2(high[1], 4)

        log = open(self.log_path, "wb")
        self.process = subprocess.Popen([
            chromium, "--headless=new", "--no-sandbox", "--use-fake-ui-for-media-stream", "--use-fake-device-for-media-stream",
            f"--use-file-for-fake-audio-capture={speech}", "--autoplay-policy=no-user-gesture-required",
            "--allow-loopback-in-peer-connection", "--enable-logging=stderr", "--v=0", "--no-first-run", "--disable-gpu",
            "--remote-debugging-pipe", f"--user-data-dir={folder}/chromium-profile", url,
        ], stdout=log, stderr=log, stdin=subprocess.DEVNULL, preexec_fn=arrange, pass_fds=(3, 4) + child_ends)
        log.close()
        for fd in child_ends:
            os.close(fd)
        self.commands = to_chromium[1]
        self.answers = from_chromium[0]
        self.received = b""
        self.next_id = 1
        self.session = None

    def send(self, method, params=None, to_page=True, timeout=30):
        message = {"id": self.next_id, "method": method, "params": params or {}}
        self.next_id += 1
        if to_page:
            message["sessionId"] = self.session
        os.write(self.commands, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            while b"\0" in self.received:
                line, self.received = self.received.split(b"\0", 1)
                answer = json.loads(line)
                if answer.get("id") == message["id"]:
                    if "error" in answer:
                        raise RuntimeError(f"{method} failed: {answer['error']}")
                    return answer.get("result", {})
            left = deadline - time.monotonic()
            if left <= 0:
                raise RuntimeError(f"Chromium did not answer {method} within {timeout} s; its log: {self.log_tail()}")
            ready, _, _ = select.select([self.answers], [], [], left)
            if ready:
                chunk = os.read(self.answers, 1 << 20)
                if not chunk:
                    raise RuntimeError(f"Chromium closed its DevTools pipe; its log: {self.log_tail()}")
                self.received += chunk

    def attach(self):
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            targets = self.send("Target.getTargets", to_page=False).get("targetInfos", [])
            pages = [t for t in targets if t.get("type") == "page"]
            if pages:
                self.session = self.send("Target.attachToTarget", {"targetId": pages[0]["targetId"], "flatten": True}, to_page=False)["sessionId"]
                return
            time.sleep(0.2)
        raise RuntimeError(f"Chromium opened no page; its log: {self.log_tail()}")

    def evaluate(self, expression, timeout=30):
        answer = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True, "awaitPromise": True}, timeout=timeout)
        if "exceptionDetails" in answer:
            raise RuntimeError(f"the page threw: {answer['exceptionDetails']}")
        return answer.get("result", {}).get("value")

    def wait_for(self, expression, seconds):
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            try:
                if self.evaluate(expression):
                    return True
            except RuntimeError:
                pass
            time.sleep(0.2)
        return False

    def log_tail(self):
        with open(self.log_path, errors="replace") as f:
            return "".join(f.readlines()[-20:])

    def stop(self):
        for fd in (self.commands, self.answers):
            try:
                os.close(fd)
            except OSError:
                pass
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


# The recorder put into the page (see the module's docstring): channel 0 the room as
# received, 1 the microphone as sent, 2 a 20 ms tone at `mark` (context seconds), 3 the
# same tone through a MediaStreamTrack.
RECORDER = r"""
(async () => {
  const context = new AudioContext({ sampleRate: 48000 });
  await context.resume();
  const merger = context.createChannelMerger(4);
  const node = context.createScriptProcessor(4096, 4, 1);
  const tapped = new Set();
  const tap = () => {
    for (const receiver of pc.getReceivers()) {
      const track = receiver.track;
      if (track && track.kind === "audio" && !tapped.has(track.id)) {
        tapped.add(track.id);
        context.createMediaStreamSource(new MediaStream([track])).connect(merger, 0, 0);
      }
    }
  };
  tap();
  const microphone = pc.getSenders().find(sender => sender.track && sender.track.kind === "audio").track;
  context.createMediaStreamSource(new MediaStream([microphone])).connect(merger, 0, 1);
  const mark = context.currentTime + 1;
  const tone = context.createOscillator();
  tone.frequency.value = 1000;
  tone.connect(merger, 0, 2);
  // The same tone through a MediaStreamTrack and back into the graph: how late a track's
  // audio reaches the recorder (the microphone's and the room's do so too).
  const loop = context.createMediaStreamDestination();
  tone.connect(loop);
  context.createMediaStreamSource(loop.stream).connect(merger, 0, 3);
  tone.start(mark);
  tone.stop(mark + 0.02);
  merger.connect(node);
  node.connect(context.destination);
  const recording = { blocks: [], clock: [], mark: mark, timeOrigin: performance.timeOrigin, tapped: tapped, recording: true };
  node.onaudioprocess = event => {
    if (!recording.recording) return;
    const block = [event.playbackTime];
    for (let channel = 0; channel < 4; channel++) block.push(new Float32Array(event.inputBuffer.getChannelData(channel)));
    recording.blocks.push(block);
  };
  recording.timer = setInterval(() => {
    tap();
    const output = context.getOutputTimestamp();
    recording.clock.push([performance.now(), context.currentTime, output.contextTime, output.performanceTime]);
  }, 20);
  recording.context = context;
  window.parleyRecording = recording;
  return { sampleRate: context.sampleRate, baseLatency: context.baseLatency, outputLatency: context.outputLatency };
})()
"""

# Stops the recorder; answers the blocks' times and the clock readings.
STOP = r"""
(() => {
  const r = window.parleyRecording;
  r.recording = false;
  clearInterval(r.timer);
  return { mark: r.mark, timeOrigin: r.timeOrigin, clock: r.clock, blocks: r.blocks.map(b => b[0]), length: r.blocks.length ? r.blocks[0][1].length : 0,
           tracks: r.tapped.size, outputLatency: r.context.outputLatency, baseLatency: r.context.baseLatency };
})()
"""

# Blocks `from`..`to` of one channel as 16-bit PCM, base64.
FETCH = r"""
((channel, from, to) => {
  const blocks = window.parleyRecording.blocks.slice(from, to);
  const length = blocks.length ? blocks[0][1].length : 0;
  const pcm = new Int16Array(blocks.length * length);
  blocks.forEach((b, i) => { const s = b[1 + channel]; for (let j = 0; j < length; j++) pcm[i * length + j] = Math.max(-32768, Math.min(32767, Math.round(s[j] * 32767))); });
  const bytes = new Uint8Array(pcm.buffer);
  let text = "";
  for (let i = 0; i < bytes.length; i += 8192) text += String.fromCharCode.apply(null, bytes.subarray(i, i + 8192));
  return btoa(text);
})(%d, %d, %d)
"""

# Reception per received stream, and what was sent.
STATS = r"""
(async () => {
  const streams = [];
  let sent = 0;
  (await pc.getStats()).forEach(e => {
    if (e.type === "inbound-rtp" && e.kind === "audio") {
      streams.push({ ssrc: e.ssrc, packetsReceived: e.packetsReceived || 0, packetsLost: e.packetsLost || 0,
                     totalSamplesReceived: e.totalSamplesReceived || 0, concealedSamples: e.concealedSamples || 0,
                     silentConcealedSamples: e.silentConcealedSamples || 0, concealmentEvents: e.concealmentEvents || 0,
                     insertedSamplesForDeceleration: e.insertedSamplesForDeceleration || 0,
                     removedSamplesForAcceleration: e.removedSamplesForAcceleration || 0, fecPacketsReceived: e.fecPacketsReceived || 0,
                     jitterBufferDelay: e.jitterBufferDelay || 0, jitterBufferEmittedCount: e.jitterBufferEmittedCount || 0,
                     totalAudioEnergy: e.totalAudioEnergy || 0 });
    }
    if (e.type === "outbound-rtp" && e.kind === "audio") sent += e.packetsSent || 0;
  });
  return { streams: streams, packetsSent: sent };
})()
"""


def browser_recording(page, folder, wall_minus_monotonic_ns):
    """Writes the browser's ear (room) and mouth (microphone) recordings as WAVs on the
    context's timeline and answers each one's CLOCK_MONOTONIC start, in ns."""
    info = page.evaluate(STOP)
    times, length = info["blocks"], info["length"]
    if not times:
        raise RuntimeError("the page's recorder got no audio (its AudioContext never ran)")
    channels = []
    for channel in range(4):
        samples = []
        for start in range(0, len(times), 100):
            data = base64.b64decode(page.evaluate(FETCH % (channel, start, start + 100), timeout=60))
            samples += struct.unpack(f"<{len(data) // 2}h", data)
        channels.append(samples)
    info["wallMinusMonotonicNanoseconds"] = wall_minus_monotonic_ns
    with open(os.path.join(folder, "recorder.json"), "w") as f:
        json.dump(info, f)
    for channel in range(4):
        write_wav(os.path.join(folder, f"recorder-{channel}.wav"), channels[channel])
    return lay_out(folder)


def lay_out(folder):
    """The recorder's blocks (`recorder-N.wav`, end to end, and `recorder.json`) laid out on
    the wall clock as `browser-heard.wav` and `browser-said.wav`."""
    with open(os.path.join(folder, "recorder.json")) as f:
        info = json.load(f)
    wall_minus_monotonic_ns = info["wallMinusMonotonicNanoseconds"]
    times, length = info["blocks"], info["length"]
    channels = [read_wav(os.path.join(folder, f"recorder-{channel}.wav"))[1] for channel in range(4)]
    # The tone fixes how far each block's samples sit before its playbackTime: found in the
    # blocks laid end to end (a sine from phase 0, so its first sample is zero and the next
    # ~0.13 of full scale: the mark is one sample before the onset found).
    onset = next((i for i, s in enumerate(channels[2]) if abs(s) > 400), None)
    if onset is None:
        raise RuntimeError("the page's recorder lost its timing tone")
    looped = next((i for i, s in enumerate(channels[3]) if abs(s) > 400), None)
    track_latency_ms = (looped - onset) * 1000 / RATE if looped is not None else None
    block, within = divmod(onset - 1, length)
    lead = times[block] - (info["mark"] - within / RATE)
    # Each block's first sample on the wall clock: its context time, plus the context clock's
    # offset from performance.now() there (the earliest reading near it: when that audio was
    # rendered; the offset is not constant when the audio clock falls behind a busy machine).
    clock = sorted((current, now - current * 1000) for now, current, _, _ in info["clock"] if current > 0)
    if not clock:
        raise RuntimeError("the page's recorder read no clock")

    def render_offset(context_seconds):
        near = [offset for current, offset in clock if abs(current - context_seconds) <= 0.5]
        return min(near) if near else min(clock, key=lambda pair: abs(pair[0] - context_seconds))[1]

    walls = [info["timeOrigin"] + (t - lead) * 1000 + render_offset(t - lead) for t in times]
    first_wall = walls[0]
    positions = [round((wall - first_wall) * RATE / 1000) for wall in walls]
    timeline = [[0] * (max(positions) + length) for _ in range(2)]
    for index, position in enumerate(positions):
        for channel in range(2):
            timeline[channel][position:position + length] = channels[channel][index * length:(index + 1) * length]
    start_monotonic_ns = int(first_wall * 1e6) - wall_minus_monotonic_ns
    offsets_ms = [offset for _, offset in clock]
    output_offsets_ms = [performance - context * 1000 for _, _, context, performance in info["clock"] if context > 0]
    # Blocks that the page's main thread took too late to keep, and how far the audio clock
    # fell behind the wall clock over the run.
    gaps = sum(1 for a, b in zip(times, times[1:]) if (b - a) * RATE > 1.5 * length)
    drift_ms = clock[-1][1] - clock[0][1]
    write_wav(os.path.join(folder, "browser-heard.wav"), timeline[0])
    write_wav(os.path.join(folder, "browser-said.wav"), timeline[1])
    return {
        "startMonotonicNanoseconds": start_monotonic_ns, "seconds": len(timeline[0]) / RATE, "blocksSkipped": gaps,
        "receivedTracks": info["tracks"], "outputLatency": info["outputLatency"], "baseLatency": info["baseLatency"],
        # How much later the (fake) output device plays what the graph rendered.
        "deviceLatencyMilliseconds": (statistics.median(output_offsets_ms) - min(offsets_ms)) if output_offsets_ms else None,
        "audioClockBehindMilliseconds": drift_ms,
        # How late a MediaStreamTrack's audio reaches the recorder (a tone through one).
        "trackLatencyMilliseconds": track_latency_ms,
    }


def wall_minus_monotonic():
    readings = []
    for _ in range(9):
        a = time.monotonic_ns()
        wall = time.time_ns()
        b = time.monotonic_ns()
        readings.append(wall - (a + b) // 2)
    return int(statistics.median(readings))


# --- One run ---------------------------------------------------------------------------------

def free_ports(count):
    sockets = []
    for _ in range(count):
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.bind(("127.0.0.1", 0))
        sockets.append(s)
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def free_tcp_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def run(kind, args, folder):
    """One call of five: `kind` is "clean" (turns, no impairment), "talking" (everyone talks,
    no impairment: what the browser conceals with no loss at all, its DTX silences and
    talkspurt ends) or "loss" (everyone talks, the lossy listeners behind the proxy)."""
    os.makedirs(folder, exist_ok=True)
    binary = lambda name: os.path.join(args.bin, name)
    secret = os.path.join(folder, "relay.secret")
    subprocess.run([binary("parley-relay"), "keygen", "--out", secret, "--force"], check=True, stdout=subprocess.DEVNULL)
    relay_port, proxy_port = free_ports(2)
    web_port = free_tcp_port()
    processes = []
    try:
        lossy = kind == "loss"
        talking = kind in ("loss", "talking")
        relay_command = [binary("parley-relay"), "serve", "--listen", f"127.0.0.1:{relay_port}", "--admin", "off",
                         "--web", f"127.0.0.1:{web_port}", "--secret-file", secret, "--threads", "1", "--log-level", "warning"]
        if lossy:
            # The browser reaches the relay through the proxy: the relay names it as its candidate.
            relay_command += ["--public-address", f"127.0.0.1:{proxy_port}"]
            netsim = subprocess.Popen([binary("parley"), "netsim", "--listen", f"127.0.0.1:{proxy_port}", "--to", f"127.0.0.1:{relay_port}",
                                       "--down", f"loss={args.loss}%", "--seed", str(args.seed), "--quiet"],
                                      stdout=open(os.path.join(folder, "netsim-report.txt"), "w"), stderr=open(os.path.join(folder, "netsim.log"), "w"))
            processes.append(netsim)
        relay = subprocess.Popen(relay_command, stdout=subprocess.DEVNULL, stderr=open(os.path.join(folder, "relay.log"), "w"))
        processes.append(relay)
        time.sleep(1)

        def token(identity, via_proxy):
            address = f"127.0.0.1:{proxy_port if via_proxy else relay_port}"
            out = subprocess.run([binary("parley-relay"), "token", "--secret-file", secret, "--room", "five", "--identity", identity,
                                  "--ttl", "1h", "--relay", address], check=True, capture_output=True, text=True).stdout.split()
            return out[0], out[-1]

        browser_token, _ = token(BROWSER, lossy)
        speech = args.speech
        browser_speech = os.path.join(speech, f"{BROWSER}-talking.wav")
        page = Chromium(args.chromium, f"http://127.0.0.1:{web_port}/join#token={browser_token}", browser_speech, folder)
        try:
            page.attach()
            if not page.wait_for("document.getElementById('mute').disabled === false", 120):
                status = page.evaluate("document.getElementById('status').textContent")
                raise RuntimeError(f"the page never joined; it says {status!r}; Chromium's log: {page.log_tail()}")
            recorder = page.evaluate(RECORDER)
            if recorder["sampleRate"] != RATE:
                raise RuntimeError(f"the page's AudioContext runs at {recorder['sampleRate']} Hz")
            time.sleep(1.5)  # past the timing tone

            # The lossy path's parley listeners through the proxy like the browser: every one of
            # them (each sender's protection then follows a room where every listener loses as
            # the browser does), or only eve (`--lossy-listeners eve`).
            calls = {}
            for name in PARLEY_TALKERS:
                _, invite = token(name, lossy and (args.lossy_listeners == "all" or name == "eve"))
                member = os.path.join(folder, name)
                os.makedirs(member, exist_ok=True)
                source = os.path.join(speech, f"{name}-{'talking' if talking else 'turns'}.wav")
                calls[name] = subprocess.Popen([
                    binary("parley"), "call", invite, "--name", name, "--input", source, "--output", os.path.join(member, "heard.wav"),
                    "--record-received", os.path.join(member, "received"), "--stats-json", os.path.join(member, "stats.json"),
                    "--duration", str(args.seconds), "--quiet"],
                    stdout=open(os.path.join(member, "summary.txt"), "w"), stderr=open(os.path.join(member, "errors.txt"), "w"))
            warnings = []
            for name, call in calls.items():
                status = call.wait(args.seconds + 60)
                errors = open(os.path.join(folder, name, "errors.txt")).read().strip()
                if not os.path.exists(os.path.join(folder, name, "stats.json")):
                    raise RuntimeError(f"{name}'s call failed (exit {status}): {errors}")
                if status != 0:
                    # A call that ended with a complaint (a recording that fell behind on a
                    # busy machine) still measured: say so beside its figures.
                    warnings.append(f"{name}'s call exited {status}: {errors}")
                    print(f"    warning: {warnings[-1]}", flush=True)
            stats = page.evaluate(STATS)
            recording = browser_recording(page, folder, wall_minus_monotonic())
        finally:
            page.stop()
        return {"browser": stats, "recording": recording, "warnings": warnings,
                "parley": {name: json.load(open(os.path.join(folder, name, "stats.json"))) for name in PARLEY_TALKERS}}
    finally:
        for process in processes:
            process.terminate()
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()


def call_quality(args, sent, received, sender=None, sent_at=None, receiver=None, received_at=None):
    command = [os.path.join(args.bin, "parley-bench"), "call-quality", "--sent", sent, "--received", received, "--json"]
    command += ["--sender-stats", sender] if sender else ["--sent-started-at", str(sent_at)]
    command += ["--receiver-stats", receiver] if receiver else ["--received-started-at", str(received_at)]
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        return {"error": result.stderr.strip()}
    report = json.loads(result.stdout)
    report.pop("windows", None)
    return report


def delays(args, folder, result):
    """Mouth-to-ear between the browser and each parley client, both ways, and between
    parley clients, from the clean run."""
    # Both of the page's taps hear a track late by the FIFO measured in the page: what they
    # recorded at t was heard (and said) at t minus that.
    latency = result["recording"]["trackLatencyMilliseconds"] or 0
    started = result["recording"]["startMonotonicNanoseconds"] - int(latency * 1e6)
    heard = os.path.join(folder, "browser-heard.wav")
    said = os.path.join(folder, "browser-said.wav")
    pairs = []
    for name in PARLEY_TALKERS:
        member = os.path.join(folder, name)
        pairs.append((f"{name} → browser", call_quality(args, os.path.join(args.speech, f"{name}-turns.wav"), heard,
                                                         sender=os.path.join(member, "stats.json"), received_at=started)))
        pairs.append((f"browser → {name}", call_quality(args, said, os.path.join(member, "received", f"{BROWSER}.wav"),
                                                         sent_at=started, receiver=os.path.join(member, "stats.json"))))
    for talker, listener in [("bob", "cy"), ("cy", "dee"), ("dee", "eve"), ("eve", "bob")]:
        pairs.append((f"{talker} → {listener}", call_quality(args, os.path.join(args.speech, f"{talker}-turns.wav"),
                                                              os.path.join(folder, listener, "received", f"{talker}.wav"),
                                                              sender=os.path.join(folder, talker, "stats.json"),
                                                              receiver=os.path.join(folder, listener, "stats.json"))))
    return pairs


def summary(pairs):
    """Median mouth-to-ear of each direction over the pairs whose recording matched what was
    said (envelope correlation 0.5 or more: the voice was heard), and the pairs not heard."""
    groups = {"parley → browser": [], "browser → parley": [], "parley → parley": []}
    unheard = []
    for label, quality in pairs:
        talker, listener = label.split(" → ")
        group = f"{'browser' if talker == BROWSER or talker == 'browser' else 'parley'} → {'browser' if listener == 'browser' else 'parley'}"
        if quality.get("delayMedianMilliseconds") is None or quality.get("envelopeCorrelation", 0) < 0.5:
            unheard.append(label)
        else:
            groups[group].append(quality["delayMedianMilliseconds"])
    return {group: statistics.median(values) if values else None for group, values in groups.items()}, unheard


def concealment(result):
    streams = result["browser"]["streams"]
    total = sum(s["totalSamplesReceived"] for s in streams)
    concealed = sum(s["concealedSamples"] for s in streams)
    silent = sum(s["silentConcealedSamples"] for s in streams)
    browser = {"streams": len(streams), "concealedPercent": 100 * concealed / total if total else None,
               "concealedNotSilentPercent": 100 * (concealed - silent) / total if total else None,
               "lossPercent": 100 * sum(s["packetsLost"] for s in streams) / max(1, sum(s["packetsLost"] + s["packetsReceived"] for s in streams))}
    parley = {}
    for name, stats in result["parley"].items():
        speakers = stats.get("speakers", [])
        frames = sum(s["audioFrames"] for s in speakers)
        parley[name] = {"concealedPercent": 100 * sum(s["concealedFrames"] for s in speakers) / frames if frames else None,
                        "fecPercent": 100 * sum(s["fecRecoveredFrames"] for s in speakers) / frames if frames else None,
                        "redPercent": 100 * sum(s.get("redundancyRecoveredFrames", 0) for s in speakers) / frames if frames else None,
                        "lossPercent": stats.get("lossDownPercent"), "speakers": len(speakers)}
    return browser, parley


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bin", required=True, help="folder of parley, parley-relay and parley-bench")
    parser.add_argument("--out", required=True)
    parser.add_argument("--loss", type=float, default=10)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--seconds", type=float, default=40)
    parser.add_argument("--chromium", default="/usr/bin/chromium")
    parser.add_argument("--runs", default="clean,talking,loss")
    parser.add_argument("--lossy-listeners", choices=["all", "eve"], default="all",
                        help="which parley listeners reach the relay through the lossy proxy besides the browser")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    args.speech = os.path.join(args.out, "speech")
    make_speech(args.speech, args.seconds + 15, turns_seconds=args.seconds - 2)
    report = {}
    for kind in args.runs.split(","):
        folder = os.path.join(args.out, kind)
        print(f"==> {kind}: a browser and four parley calls, {args.seconds:g} s", flush=True)
        result = run(kind, args, folder)
        report[kind] = result
        browser, parley = concealment(result)
        report[kind]["concealment"] = {"browser": browser, "parley": parley}
        recording = result["recording"]
        print(f"    browser recorded {recording['seconds']:.1f} s from {recording['receivedTracks']} received tracks "
              f"({recording['blocksSkipped']} blocks skipped; its audio clock fell {recording['audioClockBehindMilliseconds']:.0f} ms behind, "
              f"output device {recording['deviceLatencyMilliseconds']} ms later)")
        print(f"    browser: {browser['streams']} streams, loss {browser['lossPercent']:.1f} %, concealed {browser['concealedPercent']:.2f} % "
              f"({browser['concealedNotSilentPercent']:.2f} % not silent)")
        for name, figures in parley.items():
            print(f"    {name}: loss {figures['lossPercent']} %, concealed {figures['concealedPercent']} %, FEC {figures['fecPercent']} %, "
                  f"RED {figures['redPercent']} % of {figures['speakers']} speakers")
        if kind == "clean":
            pairs = delays(args, folder, result)
            report[kind]["delays"] = dict(pairs)
            medians, unheard = summary(pairs)
            report[kind]["delayMedians"] = medians
            report[kind]["notHeard"] = unheard
            print(f"    track FIFO in the page (taken off both browser taps): {result['recording']['trackLatencyMilliseconds']} ms")
            for label, quality in pairs:
                if "error" in quality:
                    print(f"    {label}: {quality['error']}")
                else:
                    print(f"    {label}: mouth-to-ear median {quality.get('delayMedianMilliseconds')} ms, p95 {quality.get('delayP95Milliseconds')} ms, "
                          f"envelope {quality['envelopeCorrelation']:.2f}, unmatched windows {quality['unmatchedWindows']}")
        if kind == "clean":
            text = lambda value: "none heard" if value is None else f"{value:.0f} ms"
            print(f"    mouth-to-ear medians: parley → browser {text(medians['parley → browser'])}, browser → parley "
                  f"{text(medians['browser → parley'])}, parley → parley {text(medians['parley → parley'])}")
            if unheard:
                print(f"    not heard (envelope correlation under 0.5): {', '.join(unheard)}")
    if "loss" in report:
        # What the loss itself costs each side: the browser's share less what it conceals with no
        # loss in the same speech (the talking run), against the lossy parley listeners'.
        browser = report["loss"]["concealment"]["browser"]
        base = report.get("talking", {}).get("concealment", {}).get("browser")
        lossy = [f for f in report["loss"]["concealment"]["parley"].values() if (f["lossPercent"] or 0) > 0 and f["concealedPercent"] is not None]
        mean = statistics.mean(f["concealedPercent"] for f in lossy) if lossy else None
        line = f"==> under {args.loss:g} % loss: browser concealed {browser['concealedPercent']:.2f} % ({browser['concealedNotSilentPercent']:.2f} % not silent)"
        if base:
            line += (f", {browser['concealedPercent'] - base['concealedPercent']:.2f} % "
                     f"({browser['concealedNotSilentPercent'] - base['concealedNotSilentPercent']:.2f} % not silent) more than with no loss")
        if mean is not None:
            line += f"; the {len(lossy)} lossy parley listeners {mean:.2f} % (mean)"
        print(line)
        report["lossSummary"] = line
    with open(os.path.join(args.out, "report.json"), "w") as f:
        json.dump(report, f, indent=1, default=str)
    print(f"==> report in {args.out}/report.json")


if __name__ == "__main__":
    main()
