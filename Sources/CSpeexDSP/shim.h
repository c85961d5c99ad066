#ifndef PARLEY_CSPEEXDSP_SHIM_H
#define PARLEY_CSPEEXDSP_SHIM_H
#include <speex/speex_echo.h>
#include <speex/speex_preprocess.h>
#include <speex/speex_resampler.h>
#include <stdint.h>

// SpeexDSP's ctl functions take `void *`; these give each request a typed signature
// so Swift never passes a pointer of the wrong type.
static inline int parley_speex_echo_set_int(SpeexEchoState *st, int request, spx_int32_t value) {
    return speex_echo_ctl(st, request, &value);
}
static inline int parley_speex_echo_get_int(SpeexEchoState *st, int request, spx_int32_t *value) {
    return speex_echo_ctl(st, request, value);
}
static inline int parley_speex_preprocess_set_int(SpeexPreprocessState *st, int request, spx_int32_t value) {
    return speex_preprocess_ctl(st, request, &value);
}
static inline int parley_speex_preprocess_get_int(SpeexPreprocessState *st, int request, spx_int32_t *value) {
    return speex_preprocess_ctl(st, request, value);
}
static inline int parley_speex_preprocess_set_float(SpeexPreprocessState *st, int request, float value) {
    return speex_preprocess_ctl(st, request, &value);
}
static inline int parley_speex_preprocess_attach_echo(SpeexPreprocessState *st, SpeexEchoState *echo) {
    return speex_preprocess_ctl(st, SPEEX_PREPROCESS_SET_ECHO_STATE, echo);
}

#endif
