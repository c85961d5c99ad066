#ifndef PARLEY_COPENSSL_SHIM_H
#define PARLEY_COPENSSL_SHIM_H
// OpenSSL from Debian (libssl-dev), for the relay's DTLS with browsers. Swift reaches it only
// through CParleyDTLS, whose C owns every OpenSSL object.
#include <openssl/ssl.h>
#endif
