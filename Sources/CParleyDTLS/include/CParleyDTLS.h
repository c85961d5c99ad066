// DTLS 1.2 for DTLS-SRTP (RFC 5764) with browsers, on Debian's OpenSSL, with no sockets:
// datagrams go in through parley_dtls_receive and come out through parley_dtls_next_datagram,
// so the relay's own loops carry them on its one UDP port.
//
// Why a C layer: OpenSSL's DTLS needs a BIO that keeps datagram boundaries (a memory BIO is a
// byte stream and would glue a flight's records together), several of its calls are macros
// Swift cannot import, and every OpenSSL object here is created and freed in one place.
// Each parley_dtls_context and parley_dtls is owned by exactly one Swift object
// (DTLSContext, DTLSConnection in ParleyWebRTC), which frees it in deinit.
#ifndef CPARLEY_DTLS_H
#define CPARLEY_DTLS_H

#include <stddef.h>
#include <stdint.h>

typedef struct parley_dtls_context parley_dtls_context;
typedef struct parley_dtls parley_dtls;

/// SRTP protection profiles (RFC 5764 §4.1.2, RFC 7714 §14.2), as OpenSSL numbers them.
enum {
    PARLEY_SRTP_AES128_CM_SHA1_80 = 0x0001,
    PARLEY_SRTP_AEAD_AES_128_GCM = 0x0007,
};

/// What feeding a datagram or a timer did to the handshake.
enum {
    PARLEY_DTLS_IN_PROGRESS = 0,
    PARLEY_DTLS_ESTABLISHED = 1,
    PARLEY_DTLS_FAILED = -1,
    /// The peer sent close_notify.
    PARLEY_DTLS_CLOSED = -2,
};

/// A context with a fresh ECDSA P-256 key and a self-signed certificate valid for
/// `validity_days`, offering the two SRTP profiles above. NULL on failure, with a reason
/// written to `error` (NUL-terminated, at most `error_size` bytes).
parley_dtls_context *parley_dtls_context_new(int validity_days, char *error, size_t error_size);
void parley_dtls_context_free(parley_dtls_context *context);
/// The SHA-256 of the certificate's DER: what `a=fingerprint:sha-256` announces. 32 bytes.
void parley_dtls_context_fingerprint(const parley_dtls_context *context, uint8_t *out32);

/// A connection as server (`is_server` 1) or client (0) whose peer's certificate must have
/// SHA-256 fingerprint `expected_fingerprint32`; a different one fails the handshake.
/// Datagrams written are at most `mtu` bytes. NULL if OpenSSL could not allocate.
parley_dtls *parley_dtls_new(parley_dtls_context *context, int is_server, const uint8_t *expected_fingerprint32, uint16_t mtu);
void parley_dtls_free(parley_dtls *dtls);

/// A server's first datagram from a peer whose address is `peer` (any bytes naming it, at most
/// 32): a ClientHello without a valid cookie is answered with a HelloVerifyRequest (queued as
/// a datagram, smaller than the hello) and 0 is returned; the caller sends it and frees the
/// connection, keeping nothing. 1: the hello carried the cookie this process made for that
/// address in the last two minutes, and the handshake goes on with parley_dtls_start.
/// -1: not a usable ClientHello. The cookie is an HMAC of the address under a random key of
/// this process (RFC 6347 §4.2.1), so proving it needs no state.
int parley_dtls_listen(parley_dtls *dtls, const uint8_t *datagram, size_t count, const uint8_t *peer, size_t peer_count);
/// Starts the handshake (a client sends its ClientHello). Returns a PARLEY_DTLS_ state.
int parley_dtls_start(parley_dtls *dtls);
/// Hands over one datagram from the peer. Returns a PARLEY_DTLS_ state.
int parley_dtls_receive(parley_dtls *dtls, const uint8_t *datagram, size_t count);
/// Milliseconds until the handshake's retransmission timer fires, or -1 if none runs.
long parley_dtls_timeout_milliseconds(parley_dtls *dtls);
/// Retransmits the last flight if its timer has fired. Returns a PARLEY_DTLS_ state.
int parley_dtls_handle_timeout(parley_dtls *dtls);
/// Copies the next datagram to send into `out` and returns its size; 0 when none waits,
/// or when `capacity` is too small for it (it is then dropped: DTLS retransmits).
size_t parley_dtls_next_datagram(parley_dtls *dtls, uint8_t *out, size_t capacity);
/// Sends close_notify (queued as a datagram).
void parley_dtls_shutdown(parley_dtls *dtls);

/// After PARLEY_DTLS_ESTABLISHED: the negotiated profile (0 if none).
int parley_dtls_srtp_profile(parley_dtls *dtls);
/// Exports the SRTP master keys and salts (RFC 5764 §4.2: client key, server key, client
/// salt, server salt) into `out`; returns 1 on success.
int parley_dtls_export_srtp_keying_material(parley_dtls *dtls, uint8_t *out, size_t count);
/// The last OpenSSL error of this thread, as text (for logs); never NULL.
const char *parley_dtls_error_text(char *buffer, size_t size);

#endif
