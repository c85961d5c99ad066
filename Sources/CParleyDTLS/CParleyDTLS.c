#include "CParleyDTLS.h"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct parley_dtls_context {
    SSL_CTX *ctx;
    uint8_t fingerprint[32];
};

/// Datagrams OpenSSL wrote and the caller has not taken yet, each behind a 2-byte length.
typedef struct {
    uint8_t *bytes;
    size_t count;
    size_t capacity;
    size_t read;
} datagram_queue;

struct parley_dtls {
    SSL *ssl;
    /// The peer's datagrams, one at a time (a memory BIO: it is read right after each write).
    BIO *incoming;
    /// A BIO of ours: each write is one datagram, queued in `outgoing`.
    BIO *writer;
    datagram_queue outgoing;
    uint8_t expected_fingerprint[32];
    uint16_t mtu;
    int established;
    /// Names the peer's address in its DTLS cookie (parley_dtls_listen).
    uint8_t peer[32];
    size_t peer_count;
};

/// Queued output is capped: a handshake's flight is a few KiB; more means something is wrong.
#define PARLEY_DTLS_MAXIMUM_QUEUED (64 * 1024)

static int ssl_index = -1;
/// The key of this process's DTLS cookies: random, never leaves it.
static uint8_t cookie_key[32];
static int cookie_key_ready = 0;
static BIO_METHOD *writer_method = NULL;
static pthread_once_t setup_once = PTHREAD_ONCE_INIT;

// MARK: The datagram BIO

static int writer_write(BIO *bio, const char *data, int length) {
    struct parley_dtls *dtls = BIO_get_data(bio);
    if (dtls == NULL || length < 0 || length > 0xFFFF) return -1;
    datagram_queue *queue = &dtls->outgoing;
    size_t needed = queue->count + 2 + (size_t)length;
    if (needed > PARLEY_DTLS_MAXIMUM_QUEUED) return length; // dropped: DTLS retransmits
    if (needed > queue->capacity) {
        size_t capacity = queue->capacity == 0 ? 4096 : queue->capacity;
        while (capacity < needed) capacity *= 2;
        uint8_t *grown = realloc(queue->bytes, capacity);
        if (grown == NULL) return -1;
        queue->bytes = grown;
        queue->capacity = capacity;
    }
    queue->bytes[queue->count] = (uint8_t)(length >> 8);
    queue->bytes[queue->count + 1] = (uint8_t)length;
    memcpy(queue->bytes + queue->count + 2, data, (size_t)length);
    queue->count = needed;
    return length;
}

static long writer_ctrl(BIO *bio, int command, long number, void *pointer) {
    (void)number;
    (void)pointer;
    struct parley_dtls *dtls = BIO_get_data(bio);
    switch (command) {
    case BIO_CTRL_FLUSH:
        return 1;
    case BIO_CTRL_WPENDING:
    case BIO_CTRL_PENDING:
        return 0;
    case BIO_CTRL_DGRAM_QUERY_MTU:
    case BIO_CTRL_DGRAM_GET_FALLBACK_MTU:
        return dtls != NULL ? dtls->mtu : 1200;
    case BIO_CTRL_DGRAM_GET_MTU_OVERHEAD:
        return 0;
    default:
        return 0;
    }
}

static int writer_create(BIO *bio) {
    BIO_set_init(bio, 1);
    return 1;
}

static BIO_METHOD *make_writer_method(void) {
    BIO_METHOD *method = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "parley datagram writer");
    if (method == NULL) return NULL;
    BIO_meth_set_write(method, writer_write);
    BIO_meth_set_ctrl(method, writer_ctrl);
    BIO_meth_set_create(method, writer_create);
    return method;
}

// MARK: Certificates

static int sha256_of_certificate(X509 *certificate, uint8_t *out32) {
    unsigned int length = 0;
    return X509_digest(certificate, EVP_sha256(), out32, &length) == 1 && length == 32;
}

/// The peer's certificate is self-signed (WebRTC's way): it is trusted because its
/// fingerprint is the one the signalling gave, checked here, during the handshake.
static int verify_peer(int preverified, X509_STORE_CTX *store) {
    (void)preverified;
    if (X509_STORE_CTX_get_error_depth(store) != 0) return 1;
    SSL *ssl = X509_STORE_CTX_get_ex_data(store, SSL_get_ex_data_X509_STORE_CTX_idx());
    struct parley_dtls *dtls = ssl != NULL ? SSL_get_ex_data(ssl, ssl_index) : NULL;
    X509 *certificate = X509_STORE_CTX_get_current_cert(store);
    uint8_t fingerprint[32];
    if (dtls == NULL || certificate == NULL || !sha256_of_certificate(certificate, fingerprint)) return 0;
    return CRYPTO_memcmp(fingerprint, dtls->expected_fingerprint, 32) == 0;
}

static void set_error(char *error, size_t size, const char *what) {
    if (error == NULL || size == 0) return;
    char reason[160];
    ERR_error_string_n(ERR_get_error(), reason, sizeof reason);
    snprintf(error, size, "%s (%s)", what, reason);
}

static X509 *self_signed_certificate(EVP_PKEY *key, int validity_days) {
    X509 *certificate = X509_new();
    if (certificate == NULL) return NULL;
    uint64_t serial = 0;
    RAND_bytes((unsigned char *)&serial, sizeof serial);
    X509_NAME *name = X509_NAME_new();
    int ok = name != NULL && X509_set_version(certificate, 2) == 1 &&
             ASN1_INTEGER_set_uint64(X509_get_serialNumber(certificate), serial >> 1) == 1 &&
             X509_gmtime_adj(X509_getm_notBefore(certificate), -86400) != NULL &&
             X509_gmtime_adj(X509_getm_notAfter(certificate), (long)validity_days * 86400) != NULL &&
             X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, (const unsigned char *)"parley-relay", -1, -1, 0) == 1 &&
             X509_set_subject_name(certificate, name) == 1 && X509_set_issuer_name(certificate, name) == 1 &&
             X509_set_pubkey(certificate, key) == 1 && X509_sign(certificate, key, EVP_sha256()) > 0;
    X509_NAME_free(name);
    if (!ok) {
        X509_free(certificate);
        return NULL;
    }
    return certificate;
}

// MARK: Cookies

/// A cookie lasts from its minute to the end of the next one.
static uint64_t cookie_epoch(void) {
    return (uint64_t)time(NULL) / 60;
}

/// HMAC-SHA256 of the epoch and the peer's address, under the process's key.
static int cookie_for(SSL *ssl, uint64_t epoch, unsigned char *out, size_t *length) {
    struct parley_dtls *dtls = SSL_get_ex_data(ssl, ssl_index);
    if (dtls == NULL || !cookie_key_ready) return 0;
    uint8_t message[8 + sizeof dtls->peer];
    for (int index = 0; index < 8; index++) message[index] = (uint8_t)(epoch >> (56 - 8 * index));
    memcpy(message + 8, dtls->peer, dtls->peer_count);
    return EVP_Q_mac(NULL, "HMAC", NULL, "SHA256", NULL, cookie_key, sizeof cookie_key, message, 8 + dtls->peer_count, out, 32, length) != NULL;
}

static int generate_cookie(SSL *ssl, unsigned char *cookie, unsigned int *length) {
    size_t written = 0;
    if (!cookie_for(ssl, cookie_epoch(), cookie, &written)) return 0;
    *length = (unsigned int)written;
    return 1;
}

static int verify_cookie(SSL *ssl, const unsigned char *cookie, unsigned int length) {
    uint64_t epoch = cookie_epoch();
    for (uint64_t back = 0; back < 2; back++) {
        unsigned char expected[32];
        size_t written = 0;
        if (cookie_for(ssl, epoch - back, expected, &written) && written == length && CRYPTO_memcmp(expected, cookie, written) == 0) return 1;
    }
    return 0;
}

// MARK: Contexts

static void set_up(void) {
    ssl_index = SSL_get_ex_new_index(0, NULL, NULL, NULL, NULL);
    writer_method = make_writer_method();
    cookie_key_ready = RAND_bytes(cookie_key, sizeof cookie_key) == 1;
}

parley_dtls_context *parley_dtls_context_new(int validity_days, char *error, size_t error_size) {
    pthread_once(&setup_once, set_up);
    if (ssl_index < 0 || writer_method == NULL || !cookie_key_ready) {
        set_error(error, error_size, "OpenSSL could not be set up");
        return NULL;
    }
    parley_dtls_context *context = calloc(1, sizeof *context);
    EVP_PKEY *key = EVP_EC_gen("P-256");
    X509 *certificate = key != NULL ? self_signed_certificate(key, validity_days) : NULL;
    SSL_CTX *ctx = certificate != NULL ? SSL_CTX_new(DTLS_method()) : NULL;
    if (context == NULL || ctx == NULL) {
        set_error(error, error_size, "could not make a DTLS key and certificate");
        goto fail;
    }
    // DTLS 1.2 only, ECDHE with AEAD ciphers, SRTP keys exported (RFC 5764).
    if (SSL_CTX_set_min_proto_version(ctx, DTLS1_2_VERSION) != 1 || SSL_CTX_set_max_proto_version(ctx, DTLS1_2_VERSION) != 1 ||
        SSL_CTX_use_certificate(ctx, certificate) != 1 || SSL_CTX_use_PrivateKey(ctx, key) != 1 ||
        SSL_CTX_set_cipher_list(ctx, "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-ECDSA-AES256-GCM-SHA384") != 1 ||
        SSL_CTX_set_tlsext_use_srtp(ctx, "SRTP_AEAD_AES_128_GCM:SRTP_AES128_CM_SHA1_80") != 0 ||
        !sha256_of_certificate(certificate, context->fingerprint)) {
        set_error(error, error_size, "could not configure DTLS");
        goto fail;
    }
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, verify_peer);
    // A ClientHello must carry a cookie for its address (parley_dtls_listen) before the relay
    // keeps any state for it or sends it more than the HelloVerifyRequest.
    SSL_CTX_set_cookie_generate_cb(ctx, generate_cookie);
    SSL_CTX_set_cookie_verify_cb(ctx, verify_cookie);
    // No renegotiation: a peer could otherwise make the relay redo the handshake's public-key
    // work at will, and SRTP's keys come from the first handshake only.
    SSL_CTX_set_options(ctx, SSL_OP_NO_QUERY_MTU | SSL_OP_NO_TICKET | SSL_OP_NO_RENEGOTIATION);
    SSL_CTX_set_read_ahead(ctx, 1);
    context->ctx = ctx;
    X509_free(certificate);
    EVP_PKEY_free(key);
    return context;
fail:
    SSL_CTX_free(ctx);
    X509_free(certificate);
    EVP_PKEY_free(key);
    free(context);
    return NULL;
}

void parley_dtls_context_free(parley_dtls_context *context) {
    if (context == NULL) return;
    SSL_CTX_free(context->ctx);
    free(context);
}

void parley_dtls_context_fingerprint(const parley_dtls_context *context, uint8_t *out32) {
    memcpy(out32, context->fingerprint, 32);
}

// MARK: Connections

parley_dtls *parley_dtls_new(parley_dtls_context *context, int is_server, const uint8_t *expected_fingerprint32, uint16_t mtu) {
    parley_dtls *dtls = calloc(1, sizeof *dtls);
    if (dtls == NULL) return NULL;
    dtls->ssl = SSL_new(context->ctx);
    dtls->incoming = BIO_new(BIO_s_mem());
    dtls->writer = BIO_new(writer_method);
    if (dtls->ssl == NULL || dtls->incoming == NULL || dtls->writer == NULL) {
        SSL_free(dtls->ssl);
        BIO_free(dtls->incoming);
        BIO_free(dtls->writer);
        free(dtls);
        return NULL;
    }
    memcpy(dtls->expected_fingerprint, expected_fingerprint32, 32);
    dtls->mtu = mtu;
    BIO_set_mem_eof_return(dtls->incoming, -1);
    BIO_set_data(dtls->writer, dtls);
    SSL_set_ex_data(dtls->ssl, ssl_index, dtls);
    SSL_set_bio(dtls->ssl, dtls->incoming, dtls->writer);
    SSL_set_mtu(dtls->ssl, mtu);
    DTLS_set_link_mtu(dtls->ssl, mtu);
    if (is_server) {
        SSL_set_accept_state(dtls->ssl);
    } else {
        SSL_set_connect_state(dtls->ssl);
    }
    return dtls;
}

void parley_dtls_free(parley_dtls *dtls) {
    if (dtls == NULL) return;
    BIO_set_data(dtls->writer, NULL);
    SSL_free(dtls->ssl); // frees both BIOs
    free(dtls->outgoing.bytes);
    free(dtls);
}

/// Runs the handshake, or after it reads (and discards: no data channel) application data.
static int drive(parley_dtls *dtls) {
    if (SSL_get_shutdown(dtls->ssl) & SSL_RECEIVED_SHUTDOWN) return PARLEY_DTLS_CLOSED;
    if (!dtls->established) {
        int result = SSL_do_handshake(dtls->ssl);
        if (result == 1) {
            dtls->established = 1;
            return PARLEY_DTLS_ESTABLISHED;
        }
        int reason = SSL_get_error(dtls->ssl, result);
        ERR_clear_error();
        if (reason == SSL_ERROR_WANT_READ || reason == SSL_ERROR_WANT_WRITE) return PARLEY_DTLS_IN_PROGRESS;
        return PARLEY_DTLS_FAILED;
    }
    uint8_t discard[2048];
    for (;;) {
        int result = SSL_read(dtls->ssl, discard, sizeof discard);
        if (result > 0) continue;
        int reason = SSL_get_error(dtls->ssl, result);
        ERR_clear_error();
        if (reason == SSL_ERROR_ZERO_RETURN) return PARLEY_DTLS_CLOSED;
        if (reason == SSL_ERROR_WANT_READ || reason == SSL_ERROR_WANT_WRITE) return PARLEY_DTLS_ESTABLISHED;
        return PARLEY_DTLS_FAILED;
    }
}

int parley_dtls_listen(parley_dtls *dtls, const uint8_t *datagram, size_t count, const uint8_t *peer, size_t peer_count) {
    if (count == 0 || count > 0xFFFF || peer_count > sizeof dtls->peer) return -1;
    memcpy(dtls->peer, peer, peer_count);
    dtls->peer_count = peer_count;
    (void)BIO_reset(dtls->incoming);
    if (BIO_write(dtls->incoming, datagram, (int)count) != (int)count) return -1;
    BIO_ADDR *client = BIO_ADDR_new();
    if (client == NULL) return -1;
    int result = DTLSv1_listen(dtls->ssl, client);
    BIO_ADDR_free(client);
    ERR_clear_error();
    return result > 0 ? 1 : (result == 0 ? 0 : -1);
}

int parley_dtls_start(parley_dtls *dtls) {
    return drive(dtls);
}

int parley_dtls_receive(parley_dtls *dtls, const uint8_t *datagram, size_t count) {
    if (count == 0 || count > 0xFFFF) return dtls->established ? PARLEY_DTLS_ESTABLISHED : PARLEY_DTLS_IN_PROGRESS;
    // What the last datagram left unread (a fragment OpenSSL gave up on) goes: one at a time.
    (void)BIO_reset(dtls->incoming);
    if (BIO_write(dtls->incoming, datagram, (int)count) != (int)count) return PARLEY_DTLS_FAILED;
    return drive(dtls);
}

long parley_dtls_timeout_milliseconds(parley_dtls *dtls) {
    struct timeval remaining;
    if (dtls->established || DTLSv1_get_timeout(dtls->ssl, &remaining) != 1) return -1;
    return (long)remaining.tv_sec * 1000 + (long)remaining.tv_usec / 1000;
}

int parley_dtls_handle_timeout(parley_dtls *dtls) {
    if (dtls->established) return PARLEY_DTLS_ESTABLISHED;
    if (DTLSv1_handle_timeout(dtls->ssl) < 0) {
        ERR_clear_error();
        return PARLEY_DTLS_FAILED;
    }
    return PARLEY_DTLS_IN_PROGRESS;
}

size_t parley_dtls_next_datagram(parley_dtls *dtls, uint8_t *out, size_t capacity) {
    datagram_queue *queue = &dtls->outgoing;
    if (queue->read + 2 > queue->count) {
        queue->read = 0;
        queue->count = 0;
        return 0;
    }
    size_t length = (size_t)queue->bytes[queue->read] << 8 | queue->bytes[queue->read + 1];
    const uint8_t *start = queue->bytes + queue->read + 2;
    queue->read += 2 + length;
    if (length > capacity) return 0;
    memcpy(out, start, length);
    return length;
}

void parley_dtls_shutdown(parley_dtls *dtls) {
    if (dtls->established) SSL_shutdown(dtls->ssl);
    ERR_clear_error();
}

int parley_dtls_srtp_profile(parley_dtls *dtls) {
    SRTP_PROTECTION_PROFILE *profile = SSL_get_selected_srtp_profile(dtls->ssl);
    return profile != NULL ? (int)profile->id : 0;
}

int parley_dtls_export_srtp_keying_material(parley_dtls *dtls, uint8_t *out, size_t count) {
    static const char label[] = "EXTRACTOR-dtls_srtp";
    return SSL_export_keying_material(dtls->ssl, out, count, label, sizeof label - 1, NULL, 0, 0) == 1;
}

const char *parley_dtls_error_text(char *buffer, size_t size) {
    unsigned long code = ERR_get_error();
    if (code == 0) {
        snprintf(buffer, size, "no OpenSSL error");
    } else {
        ERR_error_string_n(code, buffer, size);
    }
    ERR_clear_error();
    return buffer;
}
