#ifndef PARLEY_CSRTP_SHIM_H
#define PARLEY_CSRTP_SHIM_H
// libsrtp2 from Debian (libsrtp2-dev): SRTP and SRTCP (RFC 3711, RFC 7714) for browsers'
// media. Its calls take plain pointers and ints, so Swift calls them directly; the one
// `srtp_t` a context holds is owned by ParleyWebRTC's SRTPContext.
#include <srtp2/srtp.h>
#endif
