#!/usr/bin/env python3
"""Writes the seeds parley-webrtc-fuzz starts from (Fuzz/seeds/webrtc): an ICE binding request
that the fuzz target's responder accepts (USERNAME "fuzz:peer", MESSAGE-INTEGRITY keyed with its
password, FINGERPRINT), the same with a bad integrity, and an RTP and an RTCP packet for the SRTP
contexts. Random bytes alone almost never reach past STUN's magic cookie and integrity check."""
import hashlib, hmac, os, struct, zlib

here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "webrtc")
os.makedirs(here, exist_ok=True)

def attribute(kind, value):
    padding = (4 - len(value) % 4) % 4
    return struct.pack("!HH", kind, len(value)) + value + b"\0" * padding

def binding_request(password=b"fuzzpasswordfuzzpassword"):
    transaction = bytes(range(1, 13))
    body = attribute(0x0006, b"fuzz:peer")                            # USERNAME
    body += attribute(0x0024, struct.pack("!I", 0x6E7F1EFF))          # PRIORITY
    body += attribute(0x802A, struct.pack("!Q", 0x0102030405060708))  # ICE-CONTROLLING
    body += attribute(0x0025, b"")                                    # USE-CANDIDATE
    header = lambda length: struct.pack("!HHI", 0x0001, length, 0x2112A442) + transaction
    signed = header(len(body) + 24) + body
    body += attribute(0x0008, hmac.new(password, signed, hashlib.sha1).digest())  # MESSAGE-INTEGRITY
    fingerprinted = header(len(body) + 8) + body
    body += attribute(0x8028, struct.pack("!I", (zlib.crc32(fingerprinted) ^ 0x5354554E) & 0xFFFFFFFF))
    return header(len(body)) + body

rtp = struct.pack("!BBHII", 0x90, 111, 1, 960, 0x11223344) + bytes([0xBE, 0xDE, 0, 1, 0x10, 0x7F, 0, 0]) + bytes(40) + bytes(16)
rtcp = struct.pack("!BBHI", 0x80, 200, 6, 0x11223344) + bytes(20) + struct.pack("!I", 0x80000001) + bytes(10)
for name, data in [("binding-request", binding_request()), ("binding-request-wrong-password", binding_request(b"x" * 24)),
                   ("srtp", rtp), ("srtcp", rtcp)]:
    with open(os.path.join(here, name), "wb") as seed:
        seed.write(data)
