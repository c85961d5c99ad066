/// The browser page's end-to-end encryption, as two scripts the web port serves beside the page
/// (no build step, nothing from another origin): the library (`/parley-e2ee.js`), which the
/// page and its worker both load, and the encoded-transform worker (`/parley-sframe-worker.js`).
/// Byte for byte what the `parley` client does (`ParleyE2EE`), on WebCrypto's primitives only
/// (X25519, HMAC-SHA-256 for HKDF, AES-GCM, SHA-256/512):
///
/// - **HPKE** (RFC 9180) in auth mode, `DHKEM(X25519, HKDF-SHA256)`, HKDF-SHA256, AES-128-GCM:
///   the media-key packages (`SealedMediaKey`), with the same info (room, sender, recipient).
///   Checked against RFC 9180's vectors in Chromium (`BrowserEndToEndTests`).
/// - **SFrame** (RFC 9605), `AES_128_GCM_SHA256_128`, its tag also over the RTP SSRC and
///   timestamp (`SFrameKey`, `FrameMetadata`); each block of a RED payload (RFC 2198) sealed
///   as the frame it is, with its own timestamp, since Chromium hands the transform the RED
///   payload its encoder made. Checked against RFC 9605's vector in Chromium.
/// - **Media keys**: the sender's schedule (`MediaKeySchedule`: a ratchet on a join, a fresh
///   epoch on a departure used 300 ms later), each sender's keyring (`SenderKeyring`), the
///   package (`MediaKeyPackage`), the room view's digest (`RoomView`), fingerprints and safety
///   numbers (`Fingerprint`).
///
/// The worker seals every frame the microphone's sender makes and opens every frame each
/// receiver gets, in an `RTCRtpScriptTransform`, holding a member's frames that came before
/// their key up to a second (`HeldFrames`, bounded as `StreamDecryptor`'s hold is); the page
/// does the rest (keys, pins, what is shown) and hands the worker keys by message. Keys never
/// leave the page and its worker.
enum BrowserEndToEndScripts {
    static let libraryName = "parley-e2ee.js"
    static let workerName = "parley-sframe-worker.js"

    /// The worker loads the library from this origin and nothing else.
    static let workerContentSecurityPolicy = "default-src 'none'; script-src 'self'"

    static let library = #"""
    "use strict";
    // Parley's end-to-end encryption on WebCrypto: HPKE (RFC 9180) auth mode, SFrame (RFC 9605),
    // media keys as the parley client makes and reads them. Loaded by the page and its worker.
    (function (global) {
    const subtle = crypto.subtle;
    const encoder = new TextEncoder();
    const empty = new Uint8Array(0);
    const utf8 = text => encoder.encode(text);

    function concat(...parts) {
      let size = 0;
      for (const part of parts) size += part.length;
      const out = new Uint8Array(size);
      let offset = 0;
      for (const part of parts) { out.set(part, offset); offset += part.length; }
      return out;
    }
    function hex(bytes) { return Array.from(bytes, byte => byte.toString(16).padStart(2, "0")).join(""); }
    function fromHex(text) {
      const out = new Uint8Array(text.length / 2);
      for (let index = 0; index < out.length; index++) out[index] = parseInt(text.substr(index * 2, 2), 16);
      return out;
    }
    function base64url(bytes) {
      let binary = "";
      for (const byte of bytes) binary += String.fromCharCode(byte);
      return btoa(binary).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
    }
    // Null for anything that is not base64url.
    function fromBase64url(text) {
      if (typeof text !== "string" || !/^[A-Za-z0-9_-]*$/.test(text) || text.length % 4 === 1) return null;
      let padded = text.replace(/-/g, "+").replace(/_/g, "/");
      while (padded.length % 4) padded += "=";
      try { return Uint8Array.from(atob(padded), char => char.charCodeAt(0)); } catch (error) { return null; }
    }
    function equal(a, b) {
      if (a.length !== b.length) return false;
      let difference = 0;
      for (let index = 0; index < a.length; index++) difference |= a[index] ^ b[index];
      return difference === 0;
    }
    function precedes(a, b) {
      for (let index = 0; index < Math.min(a.length, b.length); index++) if (a[index] !== b[index]) return a[index] < b[index];
      return a.length < b.length;
    }
    function u16(value) { return new Uint8Array([(value >> 8) & 255, value & 255]); }
    function u32(value) { return new Uint8Array([(value >>> 24) & 255, (value >>> 16) & 255, (value >>> 8) & 255, value & 255]); }
    function u64(value) {
      let big = BigInt(value);
      const out = new Uint8Array(8);
      for (let index = 7; index >= 0; index--) { out[index] = Number(big & 255n); big >>= 8n; }
      return out;
    }

    // HKDF-SHA256 (RFC 5869) on HMAC, so extract and expand can be used apart as HPKE needs.
    // An empty salt is HashLen zero bytes (the same HMAC key once padded).
    async function hmac(key, data) {
      const imported = await subtle.importKey("raw", key.length ? key : new Uint8Array(32), { name: "HMAC", hash: "SHA-256" }, false, ["sign"]);
      return new Uint8Array(await subtle.sign("HMAC", imported, data));
    }
    function extract(salt, ikm) { return hmac(salt, ikm); }
    async function expand(prk, info, length) {
      const blocks = [];
      let previous = empty, made = 0;
      for (let counter = 1; made < length; counter++) {
        previous = await hmac(prk, concat(previous, info, new Uint8Array([counter])));
        blocks.push(previous);
        made += previous.length;
      }
      return concat(...blocks).slice(0, length);
    }

    // HPKE (RFC 9180): DHKEM(X25519, HKDF-SHA256), HKDF-SHA256, AES-128-GCM, auth mode.
    const kemSuite = concat(utf8("KEM"), u16(0x0020));
    const hpkeSuite = concat(utf8("HPKE"), u16(0x0020), u16(0x0001), u16(0x0001));
    const hpkeVersion = utf8("HPKE-v1");
    const authMode = 0x02;
    function labeledExtract(suite, salt, label, ikm) { return extract(salt, concat(hpkeVersion, suite, utf8(label), ikm)); }
    function labeledExpand(suite, prk, label, info, length) {
      return expand(prk, concat(u16(length), hpkeVersion, suite, utf8(label), info), length);
    }
    async function importPublic(bytes) { return subtle.importKey("raw", bytes, { name: "X25519" }, true, []); }
    async function publicBytes(key) { return new Uint8Array(await subtle.exportKey("raw", key)); }
    async function diffieHellman(privateKey, publicKeyBytes) {
      return new Uint8Array(await subtle.deriveBits({ name: "X25519", public: await importPublic(publicKeyBytes) }, privateKey, 256));
    }
    // A raw X25519 private key as PKCS #8 (RFC 8410), the form WebCrypto imports (test vectors).
    async function importPrivate(bytes, extractable) {
      const pkcs8 = concat(fromHex("302e020100300506032b656e04220420"), bytes);
      return subtle.importKey("pkcs8", pkcs8, { name: "X25519" }, !!extractable, ["deriveBits"]);
    }
    async function extractAndExpand(dh, kemContext) {
      const prk = await labeledExtract(kemSuite, empty, "eae_prk", dh);
      return labeledExpand(kemSuite, prk, "shared_secret", kemContext, 32);
    }
    async function keySchedule(sharedSecret, info) {
      const pskIDHash = await labeledExtract(hpkeSuite, empty, "psk_id_hash", empty);
      const infoHash = await labeledExtract(hpkeSuite, empty, "info_hash", info);
      const context = concat(new Uint8Array([authMode]), pskIDHash, infoHash);
      const secret = await labeledExtract(hpkeSuite, sharedSecret, "secret", empty);
      const key = await labeledExpand(hpkeSuite, secret, "key", context, 16);
      const baseNonce = await labeledExpand(hpkeSuite, secret, "base_nonce", context, 12);
      return { sharedSecret, key, baseNonce, aead: await subtle.importKey("raw", key, "AES-GCM", false, ["encrypt", "decrypt"]) };
    }
    // The sender's context: sealed to `recipientKey` (32 bytes), authenticated by the sender's
    // identity ({ privateKey, publicKey: bytes }); `ephemeral` only for the RFC's vectors.
    async function setupAuthSender(recipientKey, info, sender, ephemeral) {
      const pair = ephemeral || await subtle.generateKey({ name: "X25519" }, true, ["deriveBits"]);
      const enc = await publicBytes(pair.publicKey);
      const dh = concat(await diffieHellman(pair.privateKey, recipientKey), await diffieHellman(sender.privateKey, recipientKey));
      const context = await keySchedule(await extractAndExpand(dh, concat(enc, recipientKey, sender.publicKey)), info);
      context.enc = enc;
      return context;
    }
    async function setupAuthRecipient(enc, recipient, info, senderKey) {
      const dh = concat(await diffieHellman(recipient.privateKey, enc), await diffieHellman(recipient.privateKey, senderKey));
      return keySchedule(await extractAndExpand(dh, concat(enc, recipient.publicKey, senderKey)), info);
    }
    function hpkeNonce(context, sequence) {
      const nonce = context.baseNonce.slice();
      const counter = u64(sequence);
      for (let index = 0; index < 8; index++) nonce[4 + index] ^= counter[index];
      return nonce;
    }
    async function hpkeSeal(context, sequence, aad, plaintext) {
      return new Uint8Array(await subtle.encrypt({ name: "AES-GCM", iv: hpkeNonce(context, sequence), additionalData: aad, tagLength: 128 }, context.aead, plaintext));
    }
    async function hpkeOpen(context, sequence, aad, ciphertext) {
      return new Uint8Array(await subtle.decrypt({ name: "AES-GCM", iv: hpkeNonce(context, sequence), additionalData: aad, tagLength: 128 }, context.aead, ciphertext));
    }

    // A media key package (MediaKeyPackage): version 1, KID (8), key length (1), base key,
    // members in the sender's view (2), the view's digest (32).
    function encodePackage(pkg) {
      return concat(new Uint8Array([1]), u64(pkg.keyID), new Uint8Array([pkg.baseKey.length]), pkg.baseKey, u16(pkg.memberCount), pkg.digest);
    }
    function decodePackage(bytes) {
      if (bytes.length < 10 || bytes[0] !== 1) return null;
      let keyID = 0n;
      for (let index = 1; index < 9; index++) keyID = keyID << 8n | BigInt(bytes[index]);
      const length = bytes[9];
      if (length < 16 || length > 32 || bytes.length < 10 + length + 2 + 32 || keyID >= 1n << 52n) return null;
      return { keyID: Number(keyID), baseKey: bytes.slice(10, 10 + length), memberCount: bytes[10 + length] << 8 | bytes[11 + length],
               digest: bytes.slice(12 + length, 44 + length) };
    }
    // The info that binds a package to its room and both names (each cut to 255 bytes).
    function packageInfo(room, sender, recipient) {
      const parts = [utf8("parley e2ee v1 media key")];
      for (const field of [room, sender, recipient]) {
        let bytes = utf8(field);
        if (bytes.length > 255) bytes = bytes.slice(0, 255);
        parts.push(new Uint8Array([bytes.length]), bytes);
      }
      return concat(...parts);
    }
    // sealed = enc (32) ‖ AES-128-GCM(package), sequence 0, no associated data (SealedMediaKey).
    async function sealPackage(pkg, recipientKey, recipientName, identity, senderName, room) {
      const context = await setupAuthSender(recipientKey, packageInfo(room, senderName, recipientName), identity);
      return concat(context.enc, await hpkeSeal(context, 0, empty, encodePackage(pkg)));
    }
    // The package, or null when it does not open with our identity and the sender's key.
    async function openPackage(sealed, identity, recipientName, senderKey, senderName, room) {
      if (!(sealed instanceof Uint8Array) || sealed.length <= 32 + 16 || senderKey.length !== 32) return null;
      try {
        const context = await setupAuthRecipient(sealed.slice(0, 32), identity, packageInfo(room, senderName, recipientName), senderKey);
        return decodePackage(await hpkeOpen(context, 0, empty, sealed.slice(32)));
      } catch (error) {
        return null;
      }
    }

    // SFrame (RFC 9605), AES_128_GCM_SHA256_128: key and salt per KID from the base key.
    const cipherSuite = u16(0x0004);
    async function sframeKey(baseKey, keyID) {
      const secret = await extract(empty, baseKey);
      const kid = u64(keyID);
      const key = await expand(secret, concat(utf8("SFrame 1.0 Secret key "), kid, cipherSuite), 16);
      const salt = await expand(secret, concat(utf8("SFrame 1.0 Secret salt "), kid, cipherSuite), 12);
      return { keyID: keyID, salt: salt, aead: await subtle.importKey("raw", key, "AES-GCM", false, ["encrypt", "decrypt"]) };
    }
    function valueBytes(value) {
      if (value <= 7n) return 0;
      let count = 0;
      for (let rest = value; rest > 0n; rest >>= 8n) count++;
      return count;
    }
    // The header: config byte X|K|Y|C, then the KID and the counter when they do not fit in 3 bits.
    function sframeHeader(keyID, counter) {
      const kid = BigInt(keyID), ctr = BigInt(counter);
      const kidBytes = valueBytes(kid), ctrBytes = valueBytes(ctr);
      let config = kidBytes === 0 ? Number(kid) << 4 : 0x80 | (kidBytes - 1) << 4;
      config |= ctrBytes === 0 ? Number(ctr) : 0x08 | (ctrBytes - 1);
      const out = new Uint8Array(1 + kidBytes + ctrBytes);
      out[0] = config;
      for (let index = 0; index < kidBytes; index++) out[1 + index] = Number((kid >> BigInt(8 * (kidBytes - 1 - index))) & 255n);
      for (let index = 0; index < ctrBytes; index++) out[1 + kidBytes + index] = Number((ctr >> BigInt(8 * (ctrBytes - 1 - index))) & 255n);
      return out;
    }
    // { keyID, counter (BigInt), size } of the header at the start of `bytes`, or null.
    function parseSFrameHeader(bytes) {
      if (bytes.length < 1) return null;
      const config = bytes[0];
      const kidBytes = config & 0x80 ? ((config >> 4) & 7) + 1 : 0, ctrBytes = config & 0x08 ? (config & 7) + 1 : 0;
      const size = 1 + kidBytes + ctrBytes;
      if (bytes.length < size) return null;
      let kid = BigInt((config >> 4) & 7), ctr = BigInt(config & 7);
      if (kidBytes) { kid = 0n; for (let index = 0; index < kidBytes; index++) kid = kid << 8n | BigInt(bytes[1 + index]); }
      if (ctrBytes) { ctr = 0n; for (let index = 0; index < ctrBytes; index++) ctr = ctr << 8n | BigInt(bytes[1 + kidBytes + index]); }
      if (kid >= 1n << 52n) return null;
      return { keyID: Number(kid), counter: ctr, size: size };
    }
    function sframeNonce(key, counter) {
      const nonce = key.salt.slice();
      const ctr = u64(counter);
      for (let index = 0; index < 8; index++) nonce[4 + index] ^= ctr[index];
      return nonce;
    }
    // What the tag covers besides the header: the RTP SSRC and the frame's timestamp (FrameMetadata).
    function frameMetadata(ssrc, timestamp) { return concat(u32(ssrc >>> 0), u32(timestamp >>> 0)); }
    async function sframeSeal(key, counter, metadata, plaintext) {
      const header = sframeHeader(key.keyID, counter);
      const sealed = await subtle.encrypt({ name: "AES-GCM", iv: sframeNonce(key, counter), additionalData: concat(header, metadata), tagLength: 128 },
                                          key.aead, plaintext);
      return concat(header, new Uint8Array(sealed));
    }
    // The plaintext, or null when the frame does not authenticate under `key` with `metadata`.
    async function sframeOpen(key, frame, metadata) {
      const header = parseSFrameHeader(frame);
      if (!header || header.keyID !== key.keyID || frame.length < header.size + 16) return null;
      try {
        return new Uint8Array(await subtle.decrypt({ name: "AES-GCM", iv: sframeNonce(key, header.counter), tagLength: 128,
                                                     additionalData: concat(frame.subarray(0, header.size), metadata) },
                                                   key.aead, frame.subarray(header.size)));
      } catch (error) {
        return null;
      }
    }

    // RED (RFC 2198): [{ payloadType, offset (timestamp), data }] oldest first, the primary last;
    // null when the payload is not well formed.
    function parseRED(payload) {
      const headers = [];
      let offset = 0;
      for (;;) {
        if (offset >= payload.length) return null;
        const first = payload[offset];
        if (!(first & 0x80)) { headers.push({ payloadType: first & 0x7f, offset: 0, length: -1 }); offset += 1; break; }
        if (offset + 4 > payload.length || headers.length >= 16) return null;
        headers.push({ payloadType: first & 0x7f, offset: payload[offset + 1] << 6 | payload[offset + 2] >> 2,
                       length: (payload[offset + 2] & 3) << 8 | payload[offset + 3] });
        offset += 4;
      }
      const blocks = [];
      for (const header of headers) {
        const length = header.length < 0 ? payload.length - offset : header.length;
        if (offset + length > payload.length) return null;
        blocks.push({ payloadType: header.payloadType, offset: header.offset, data: payload.subarray(offset, offset + length) });
        offset += length;
      }
      return blocks;
    }
    // Blocks whose data outgrew RED's 10-bit length are left out (a copy, never the primary).
    function buildRED(blocks) {
      const kept = blocks.filter((block, index) => index === blocks.length - 1 || block.data.length <= 1023);
      const parts = [];
      kept.forEach((block, index) => {
        if (index === kept.length - 1) parts.push(new Uint8Array([block.payloadType & 0x7f]));
        else parts.push(new Uint8Array([0x80 | block.payloadType, block.offset >> 6, (block.offset & 0x3f) << 2 | block.data.length >> 8, block.data.length & 255]));
      });
      return concat(...parts, ...kept.map(block => block.data));
    }

    // Media keys (MediaKey): KID = epoch << 4 | generation; the ratchet is HKDF of the key.
    const generationsPerEpoch = 16;
    function keyIDOf(key) { return key.epoch * 16 + key.generation; }
    function freshKey(epoch) { return { epoch: epoch, generation: 0, baseKey: crypto.getRandomValues(new Uint8Array(16)) }; }
    async function ratchet(key) {
      if (key.generation + 1 >= generationsPerEpoch) return null;
      const next = await expand(await extract(empty, key.baseKey), utf8("parley e2ee v1 ratchet"), 16);
      return { epoch: key.epoch, generation: key.generation + 1, baseKey: next };
    }
    async function ratchetTo(key, generation) {
      let current = key;
      while (current && current.generation < generation) current = await ratchet(current);
      return current;
    }

    // The sender's schedule (MediaKeySchedule): who holds our key; a departure makes a fresh
    // epoch used `switchDelay` ms later, a join ratchets (the newcomer cannot go back).
    const switchDelay = 300;
    class KeySchedule {
      constructor() { this.current = freshKey(0); this.pending = null; this.holders = new Map(); this.nextEpoch = 1; }
      takeFresh() { return freshKey(this.nextEpoch++); }
      // recipients: [{ person, identity, identityKey, ssrc }]; returns [{ recipient, key }].
      async recipientsChanged(recipients, now) {
        const people = new Set(recipients.map(recipient => recipient.person));
        const departed = [...this.holders.keys()].some(person => !people.has(person));
        const joined = [...people].some(person => !this.holders.has(person));
        const returned = recipients.filter(recipient => this.holders.has(recipient.person) && this.holders.get(recipient.person) !== recipient.ssrc);
        this.holders = new Map(recipients.map(recipient => [recipient.person, recipient.ssrc]));
        const toAll = key => recipients.map(recipient => ({ recipient: recipient, key: key }));
        if (departed) {
          const fresh = this.takeFresh();
          this.pending = { key: fresh, switchAt: now + switchDelay };
          return toAll(fresh);
        }
        if (!joined) {
          const keys = [this.current].concat(this.pending ? [this.pending.key] : []);
          return returned.flatMap(recipient => keys.map(key => ({ recipient: recipient, key: key })));
        }
        if (this.pending) {
          const next = (await ratchet(this.pending.key)) || this.takeFresh();
          this.pending = { key: next, switchAt: this.pending.switchAt };
          return toAll(next);
        }
        const next = await ratchet(this.current);
        if (next) { this.current = next; return toAll(next); }
        const fresh = this.takeFresh();
        this.pending = { key: fresh, switchAt: now + switchDelay };
        return toAll(fresh);
      }
      // The key to seal with from now, when a pending one takes over; else null.
      tick(now) {
        if (!this.pending || now < this.pending.switchAt) return null;
        this.current = this.pending.key;
        this.pending = null;
        return this.current;
      }
    }

    // One sender's keys as a listener holds them (SenderKeyring): an epoch's earliest generation
    // given, later ones derived when first needed; an epoch retires 10 s after a newer one first
    // opened a frame; at most 4 epochs.
    const retention = 10000, maximumEpochs = 4;
    class Keyring {
      constructor() { this.epochs = new Map(); this.newestOpened = null; }
      async install(key) {
        const held = this.epochs.get(key.epoch);
        if (held) {
          if (held.base.generation === key.generation && equal(held.base.baseKey, key.baseKey)) return;
          if (key.generation > held.base.generation) {
            const derived = await ratchetTo(held.base, key.generation);
            if (derived && equal(derived.baseKey, key.baseKey)) return;
          }
        }
        this.epochs.set(key.epoch, { base: key, derived: new Map(), retiresAt: null });
        while (this.epochs.size > maximumEpochs) this.epochs.delete(Math.min(...this.epochs.keys()));
      }
      // A promise of the SFrame key `keyID` names, or null when no key held reaches it.
      key(keyID, now) {
        const epoch = Math.floor(keyID / 16), generation = keyID % 16;
        const held = this.epochs.get(epoch);
        if (!held || generation < held.base.generation || (held.retiresAt !== null && now >= held.retiresAt)) return null;
        let key = held.derived.get(generation);
        if (!key) {
          key = ratchetTo(held.base, generation).then(media => media ? sframeKey(media.baseKey, keyIDOf(media)) : null);
          held.derived.set(generation, key);
        }
        if (this.newestOpened === null || epoch > this.newestOpened) {
          this.newestOpened = epoch;
          for (const [other, entry] of this.epochs) if (other < epoch && entry.retiresAt === null) entry.retiresAt = now + retention;
        }
        return key;
      }
      expire(now) { for (const [epoch, entry] of this.epochs) if (entry.retiresAt !== null && now >= entry.retiresAt) this.epochs.delete(epoch); }
      get isEmpty() { return this.epochs.size === 0; }
    }

    // Frames that came before their sender's key, per stream (StreamDecryptor's hold): a
    // newcomer's first words, or a fresh key's first frames, overtake the package that carries
    // the key. Each is kept with what it needs to be played later ({ item, size, at }) and tried
    // again when keys arrive; one held longer than `holdLimit` ms would be too late to play and
    // is given up. Bounded per stream in count and bytes and in all, so a sender whose key never
    // comes (or who sends big frames under a KID nobody gave) cannot grow it: at the bounds the
    // stream's oldest frame goes (or, when all streams together are full, the new one).
    const holdLimit = 1000, maximumHeldFrames = 50, maximumHeldBytes = 64 * 1024, maximumHeldBytesInAll = 1024 * 1024;
    class HeldFrames {
      constructor() { this.streams = new Map(); this.bytes = 0; this.given = 0; }
      // Keeps `item` (`size` bytes, arrived at `now`) for the stream `ssrc`; false when it was refused.
      hold(ssrc, item, size, now) {
        this.expire(now);
        if (!(size >= 0) || size > maximumHeldBytes) { this.given++; return false; }
        let list = this.streams.get(ssrc);
        if (!list) { list = []; this.streams.set(ssrc, list); }
        let used = list.reduce((sum, entry) => sum + entry.size, 0);
        while (list.length && (list.length >= maximumHeldFrames || used + size > maximumHeldBytes)) {
          used -= list[0].size;
          this.drop(list.shift());
        }
        if (this.bytes + size > maximumHeldBytesInAll) {
          if (!list.length) this.streams.delete(ssrc);
          this.given++;
          return false;
        }
        list.push({ item: item, size: size, at: now });
        this.bytes += size;
        return true;
      }
      // Every frame held for the streams `wanted` picks, oldest first, taken out (those too old given up).
      take(wanted, now) {
        this.expire(now);
        const taken = [];
        for (const [ssrc, list] of this.streams) {
          if (!wanted(ssrc)) continue;
          this.streams.delete(ssrc);
          for (const entry of list) { this.bytes -= entry.size; taken.push(Object.assign({ ssrc: ssrc }, entry)); }
        }
        return taken;
      }
      // Puts back frames `take` gave that still have no key, ahead of any held since.
      putBack(entries, now) {
        for (const entry of entries.slice().reverse()) {
          if (now - entry.at > holdLimit) { this.given++; continue; }
          const list = this.streams.get(entry.ssrc) || [];
          const used = list.reduce((sum, held) => sum + held.size, 0);
          if (list.length >= maximumHeldFrames || used + entry.size > maximumHeldBytes || this.bytes + entry.size > maximumHeldBytesInAll) { this.given++; continue; }
          list.unshift({ item: entry.item, size: entry.size, at: entry.at });
          this.streams.set(entry.ssrc, list);
          this.bytes += entry.size;
        }
      }
      drop(entry) { this.bytes -= entry.size; this.given++; }
      expire(now) {
        for (const [ssrc, list] of this.streams) {
          while (list.length && now - list[0].at > holdLimit) this.drop(list.shift());
          if (!list.length) this.streams.delete(ssrc);
        }
      }
      get count() { let count = 0; for (const list of this.streams.values()) count += list.length; return count; }
    }

    // The room as one member sees it (RoomView): SHA-256 over the room and every member's name
    // and key, sorted by the name's UTF-8 bytes then the key's, each length-prefixed (2 bytes).
    async function roomViewDigest(room, members) {
      const sorted = members.map(member => ({ name: utf8(member.identity), key: member.identityKey }))
        .sort((a, b) => equal(a.name, b.name) ? (precedes(a.key, b.key) ? -1 : precedes(b.key, a.key) ? 1 : 0) : (precedes(a.name, b.name) ? -1 : 1));
      const parts = [utf8("parley e2ee v1 room view")];
      const field = bytes => { const cut = bytes.slice(0, 65535); parts.push(u16(cut.length), cut); };
      field(utf8(room));
      for (const member of sorted) { field(member.name); field(member.key); }
      return new Uint8Array(await subtle.digest("SHA-256", concat(...parts)));
    }

    // Fingerprint: 8 hex digits of SHA-256; safety number: 30 digits of SHA-512 of both keys.
    async function fingerprint(publicKey) {
      const digest = new Uint8Array(await subtle.digest("SHA-256", concat(utf8("parley e2ee v1 fingerprint"), publicKey)));
      const text = hex(digest.subarray(0, 4));
      return text.slice(0, 4) + " " + text.slice(4);
    }
    async function safetyNumber(one, other) {
      const [first, second] = precedes(one, other) ? [one, other] : [other, one];
      const digest = new Uint8Array(await subtle.digest("SHA-512", concat(utf8("parley e2ee v1 safety number"), first, second)));
      const groups = [];
      for (let group = 0; group < 6; group++) {
        let value = 0;
        for (let index = 0; index < 5; index++) value = value * 256 + digest[group * 5 + index];
        groups.push(String(value % 100000).padStart(5, "0"));
      }
      return groups.join(" ");
    }

    global.ParleyE2EE = {
      concat, hex, fromHex, base64url, fromBase64url, equal, utf8,
      importPrivate, importPublic, publicBytes, setupAuthSender, setupAuthRecipient, hpkeSeal, hpkeOpen,
      encodePackage, decodePackage, packageInfo, sealPackage, openPackage,
      sframeKey, sframeHeader, parseSFrameHeader, sframeSeal, sframeOpen, frameMetadata, parseRED, buildRED,
      keyIDOf, freshKey, ratchet, KeySchedule, Keyring, HeldFrames, holdLimit, maximumHeldFrames, maximumHeldBytes, maximumHeldBytesInAll,
      roomViewDigest, fingerprint, safetyNumber,
    };
    })(self);
    """#

    static let worker = #"""
    "use strict";
    // Seals each frame the page's microphone sends and opens each frame its receivers get
    // (SFrame, RFC 9605), in an RTCRtpScriptTransform. Keys come from the page by message:
    // { type: "mode", mode: "plain" | "sealed" }, { type: "sendKey", key }, { type: "install",
    // person, key }, { type: "forget", person }, { type: "streams", streams: [[ssrc, person]] },
    // { type: "payloadTypes", red }.
    importScripts("/parley-e2ee.js");
    const E = self.ParleyE2EE;
    // Until the page says the room is not end-to-end encrypted, nothing leaves in the clear.
    let mode = "withheld";
    let redPayloadType = 63;
    // The key frames are sealed with, and the counter under it (from 0 for each new KID).
    let sending = null, counter = 0n;
    const keyrings = new Map();   // person → Keyring
    let streams = new Map();      // ssrc → person (members whose frames may play)
    // Frames of members' streams whose key has not come yet: { frame, controller } each.
    const held = new E.HeldFrames();
    // Figures the page reads (and the tests): frames sealed, opened, dropped and why; frames
    // held for their key, and of those the ones opened later (the ones given up: `held.given`).
    const counts = { sealed: 0, withheld: 0, opened: 0, plain: 0, noKey: 0, failed: 0, unknownStream: 0, empty: 0, held: 0, openedLate: 0 };
    let work = Promise.resolve();

    onmessage = event => {
      const message = event.data;
      work = work.then(async () => {
        switch (message.type) {
        case "mode": mode = message.mode; break;
        case "payloadTypes": if (Number.isInteger(message.red)) redPayloadType = message.red; break;
        case "sendKey": {
          const key = await E.sframeKey(message.key.baseKey, E.keyIDOf(message.key));
          // The same KID handed over again goes on counting: a nonce never repeats.
          if (!sending || sending.keyID !== key.keyID) counter = 0n;
          sending = key;
          mode = "sealed";
          break;
        }
        case "install": {
          let keyring = keyrings.get(message.person);
          if (!keyring) { keyring = new E.Keyring(); keyrings.set(message.person, keyring); }
          await keyring.install(message.key);
          await retryHeld(message.person);
          break;
        }
        case "forget": keyrings.delete(message.person); break;
        case "streams": streams = new Map(message.streams); break;
        case "counts":
          // Also what is held now, and whose keys (their names).
          postMessage({ type: "counts", counts: Object.assign({ givenUp: held.given, holding: held.count, heldBytes: held.bytes,
                                                                keyrings: [...keyrings.keys()].map(person => person.split("\t")[0]) }, counts) });
          break;
        }
      }).catch(() => {});
    };

    setInterval(() => { const now = performance.now(); for (const keyring of keyrings.values()) keyring.expire(now); }, 1000);
    setInterval(() => held.expire(performance.now()), 250);

    function timestampOf(frame) {
      const metadata = frame.getMetadata();
      return (metadata.rtpTimestamp !== undefined ? metadata.rtpTimestamp : frame.timestamp) >>> 0;
    }

    async function seal(frame, controller) {
      if (mode === "plain") { controller.enqueue(frame); return; }
      if (mode !== "sealed" || !sending) { counts.withheld++; return; }
      const metadata = frame.getMetadata();
      const ssrc = metadata.synchronizationSource, timestamp = timestampOf(frame);
      const data = new Uint8Array(frame.data);
      // Chromium hands the transform a few empty payloads (nothing to seal, nothing to play).
      if (data.length === 0) { counts.empty++; return; }
      const key = sending;
      if (metadata.payloadType === redPayloadType) {
        const blocks = E.parseRED(data);
        if (!blocks) { counts.withheld++; return; }
        for (const block of blocks) {
          block.data = await E.sframeSeal(key, counter, E.frameMetadata(ssrc, (timestamp - block.offset) >>> 0), block.data);
          counter++;
        }
        frame.data = E.buildRED(blocks).buffer;
      } else {
        frame.data = (await E.sframeSeal(key, counter, E.frameMetadata(ssrc, timestamp), data)).buffer;
        counter++;
      }
      counts.sealed++;
      controller.enqueue(frame);
    }

    async function openBlock(keyring, ssrc, timestamp, data) {
      const header = E.parseSFrameHeader(data);
      if (!header) return null;
      const key = keyring && keyring.key(header.keyID, performance.now());
      const resolved = key && await key;
      if (!resolved) return undefined;
      return E.sframeOpen(resolved, data, E.frameMetadata(ssrc, timestamp));
    }

    // Opens the frame in place with the keys `person` gave: "opened", "noKey" (its own frame's
    // key is not here yet) or "failed" (malformed, forged, or under a key it may not open).
    async function openFrame(frame, person) {
      const metadata = frame.getMetadata();
      const ssrc = metadata.synchronizationSource, timestamp = timestampOf(frame);
      const keyring = keyrings.get(person);
      const data = new Uint8Array(frame.data);
      if (metadata.payloadType === redPayloadType) {
        const blocks = E.parseRED(data);
        if (!blocks) return "failed";
        const opened = [];
        for (let index = 0; index < blocks.length; index++) {
          const block = blocks[index];
          const plain = await openBlock(keyring, ssrc, (timestamp - block.offset) >>> 0, block.data);
          if (plain) { block.data = plain; opened.push(block); continue; }
          // A copy that does not open is left out; the primary must open.
          if (index === blocks.length - 1) return plain === undefined ? "noKey" : "failed";
        }
        frame.data = E.buildRED(opened).buffer;
      } else {
        const plain = await openBlock(keyring, ssrc, timestamp, data);
        if (!plain) return plain === undefined ? "noKey" : "failed";
        frame.data = plain.buffer;
      }
      return "opened";
    }

    // A frame of a member's stream whose key has not come is held (E.HeldFrames) and played
    // when it does, as a late packet; one that does not open (not a member's, forged) is
    // dropped, and the receiver conceals it as a lost packet.
    async function open(frame, controller) {
      if (mode === "plain") { counts.plain++; controller.enqueue(frame); return; }
      const ssrc = frame.getMetadata().synchronizationSource;
      const person = streams.get(ssrc);
      if (person === undefined) { counts.unknownStream++; return; }
      const size = frame.data.byteLength;
      if (size === 0) { counts.empty++; return; }
      switch (await openFrame(frame, person)) {
      case "opened": counts.opened++; controller.enqueue(frame); break;
      case "noKey":
        counts.noKey++;
        if (held.hold(ssrc, { frame: frame, controller: controller }, size, performance.now())) counts.held++;
        break;
      default: counts.failed++;
      }
    }

    // Keys from `person` arrived: their streams' held frames are tried again, oldest first;
    // those whose key is still missing wait on, up to their second.
    async function retryHeld(person) {
      const taken = held.take(ssrc => streams.get(ssrc) === person, performance.now());
      const waiting = [];
      for (const entry of taken) {
        const outcome = await openFrame(entry.item.frame, person).catch(() => "failed");
        if (outcome === "opened") {
          try { entry.item.controller.enqueue(entry.item.frame); counts.openedLate++; } catch (error) { held.given++; }
        } else if (outcome === "noKey") waiting.push(entry);
        else counts.failed++;
      }
      held.putBack(waiting, performance.now());
    }

    onrtctransform = event => {
      const transformer = event.transformer;
      const act = transformer.options && transformer.options.side === "send" ? seal : open;
      transformer.readable
        .pipeThrough(new TransformStream({ transform: (frame, controller) => act(frame, controller).catch(() => {}) }))
        .pipeTo(transformer.writable)
        .catch(() => {});
    };
    """#
}
