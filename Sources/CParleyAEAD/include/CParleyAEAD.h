// ChaCha20-Poly1305 (RFC 8439) for the per-packet hop encryption, and AES-128-GCM for the
// end-to-end frame encryption (SFrame, RFC 9605), from the BoringSSL that swift-crypto
// already builds into every binary linking `Crypto`.
//
// Why not `ChaChaPoly.seal`/`open`: swift-crypto's API makes a new AEAD context from the
// key on every call and returns its results as freshly allocated `Data`, which on a
// 100-byte voice packet costs ten times the cipher itself. Here a context is made once per
// key and each packet is sealed or opened in place, in the caller's buffers, with nothing
// allocated. The ciphers are BoringSSL's EVP_AEADs, unchanged; tests check every result
// against `ChaChaPoly` and `AES.GCM`, and against RFC 9605's test vectors.
#ifndef CPARLEY_AEAD_H
#define CPARLEY_AEAD_H

#include <stddef.h>
#include <stdint.h>

typedef struct parley_aead_key parley_aead_key;

/// A ChaCha20-Poly1305 context for a 32-byte key (16-byte tags), or NULL if BoringSSL
/// could not allocate one. Free it with parley_aead_key_free.
parley_aead_key *parley_aead_key_new(const uint8_t *key32);
/// An AES-128-GCM context for a 16-byte key (16-byte tags), or NULL if BoringSSL could not
/// allocate one. Sealed and opened with the same two functions, freed with parley_aead_key_free.
parley_aead_key *parley_aead_key_new_aes128gcm(const uint8_t *key16);
void parley_aead_key_free(parley_aead_key *key);

/// Writes `in_len` bytes of ciphertext and the 16-byte tag to `out` (which may equal `in`);
/// returns 1 on success and sets *out_len. `nonce12` is 12 bytes.
int parley_aead_seal(const parley_aead_key *key, uint8_t *out, size_t *out_len, size_t max_out_len,
                     const uint8_t *nonce12, const uint8_t *in, size_t in_len,
                     const uint8_t *ad, size_t ad_len);

/// Authenticates `in` (ciphertext and tag) and writes the plaintext to `out`; returns 1 on
/// success, 0 if it does not authenticate (nothing usable is written then).
int parley_aead_open(const parley_aead_key *key, uint8_t *out, size_t *out_len, size_t max_out_len,
                     const uint8_t *nonce12, const uint8_t *in, size_t in_len,
                     const uint8_t *ad, size_t ad_len);

#endif
