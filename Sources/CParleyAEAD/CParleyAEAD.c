#include "CParleyAEAD.h"

// BoringSSL's AEAD interface (include/openssl/aead.h) under the symbol prefix swift-crypto
// gives its copy (`CCryptoBoringSSL_`). Its headers are internal to swift-crypto, so the
// few functions used here are declared by hand, exactly as BoringSSL declares them.
struct evp_aead_st;
struct evp_aead_ctx_st;
extern const struct evp_aead_st *CCryptoBoringSSL_EVP_aead_chacha20_poly1305(void);
extern const struct evp_aead_st *CCryptoBoringSSL_EVP_aead_aes_128_gcm(void);
extern struct evp_aead_ctx_st *CCryptoBoringSSL_EVP_AEAD_CTX_new(const struct evp_aead_st *aead, const uint8_t *key,
                                                                 size_t key_len, size_t tag_len);
extern void CCryptoBoringSSL_EVP_AEAD_CTX_free(struct evp_aead_ctx_st *ctx);
extern int CCryptoBoringSSL_EVP_AEAD_CTX_seal(const struct evp_aead_ctx_st *ctx, uint8_t *out, size_t *out_len,
                                              size_t max_out_len, const uint8_t *nonce, size_t nonce_len,
                                              const uint8_t *in, size_t in_len, const uint8_t *ad, size_t ad_len);
extern int CCryptoBoringSSL_EVP_AEAD_CTX_open(const struct evp_aead_ctx_st *ctx, uint8_t *out, size_t *out_len,
                                              size_t max_out_len, const uint8_t *nonce, size_t nonce_len,
                                              const uint8_t *in, size_t in_len, const uint8_t *ad, size_t ad_len);

parley_aead_key *parley_aead_key_new(const uint8_t *key32) {
    return (parley_aead_key *)CCryptoBoringSSL_EVP_AEAD_CTX_new(CCryptoBoringSSL_EVP_aead_chacha20_poly1305(), key32, 32, 16);
}

parley_aead_key *parley_aead_key_new_aes128gcm(const uint8_t *key16) {
    return (parley_aead_key *)CCryptoBoringSSL_EVP_AEAD_CTX_new(CCryptoBoringSSL_EVP_aead_aes_128_gcm(), key16, 16, 16);
}

void parley_aead_key_free(parley_aead_key *key) {
    CCryptoBoringSSL_EVP_AEAD_CTX_free((struct evp_aead_ctx_st *)key);
}

int parley_aead_seal(const parley_aead_key *key, uint8_t *out, size_t *out_len, size_t max_out_len,
                     const uint8_t *nonce12, const uint8_t *in, size_t in_len, const uint8_t *ad, size_t ad_len) {
    return CCryptoBoringSSL_EVP_AEAD_CTX_seal((const struct evp_aead_ctx_st *)key, out, out_len, max_out_len,
                                              nonce12, 12, in, in_len, ad, ad_len);
}

int parley_aead_open(const parley_aead_key *key, uint8_t *out, size_t *out_len, size_t max_out_len,
                     const uint8_t *nonce12, const uint8_t *in, size_t in_len, const uint8_t *ad, size_t ad_len) {
    return CCryptoBoringSSL_EVP_AEAD_CTX_open((const struct evp_aead_ctx_st *)key, out, out_len, max_out_len,
                                              nonce12, 12, in, in_len, ad, ad_len);
}
