#ifndef PARLEY_COPUS_SHIM_H
#define PARLEY_COPUS_SHIM_H
#include <opus.h>
#include <stdint.h>

// libopus configures its state through variadic `opus_*_ctl` calls, which Swift
// cannot call. These wrappers give each request we use a fixed signature.
static inline int parley_opus_encoder_set_int(OpusEncoder *st, int request, opus_int32 value) {
    return opus_encoder_ctl(st, request, value);
}
static inline int parley_opus_encoder_get_int(OpusEncoder *st, int request, opus_int32 *value) {
    return opus_encoder_ctl(st, request, value);
}
static inline int parley_opus_encoder_reset(OpusEncoder *st) {
    return opus_encoder_ctl(st, OPUS_RESET_STATE);
}
static inline int parley_opus_decoder_set_int(OpusDecoder *st, int request, opus_int32 value) {
    return opus_decoder_ctl(st, request, value);
}
static inline int parley_opus_decoder_get_int(OpusDecoder *st, int request, opus_int32 *value) {
    return opus_decoder_ctl(st, request, value);
}
static inline int parley_opus_decoder_reset(OpusDecoder *st) {
    return opus_decoder_ctl(st, OPUS_RESET_STATE);
}

// The request codes are macros built from other macros, which Swift does not import.
static const int PARLEY_OPUS_SET_BITRATE = OPUS_SET_BITRATE_REQUEST;
static const int PARLEY_OPUS_GET_BITRATE = OPUS_GET_BITRATE_REQUEST;
static const int PARLEY_OPUS_SET_COMPLEXITY = OPUS_SET_COMPLEXITY_REQUEST;
static const int PARLEY_OPUS_SET_INBAND_FEC = OPUS_SET_INBAND_FEC_REQUEST;
static const int PARLEY_OPUS_SET_PACKET_LOSS_PERC = OPUS_SET_PACKET_LOSS_PERC_REQUEST;
static const int PARLEY_OPUS_GET_PACKET_LOSS_PERC = OPUS_GET_PACKET_LOSS_PERC_REQUEST;
static const int PARLEY_OPUS_SET_DTX = OPUS_SET_DTX_REQUEST;
static const int PARLEY_OPUS_SET_SIGNAL = OPUS_SET_SIGNAL_REQUEST;
static const int PARLEY_OPUS_SET_VBR = OPUS_SET_VBR_REQUEST;
static const int PARLEY_OPUS_SET_MAX_BANDWIDTH = OPUS_SET_MAX_BANDWIDTH_REQUEST;
static const int PARLEY_OPUS_GET_LOOKAHEAD = OPUS_GET_LOOKAHEAD_REQUEST;
static const int PARLEY_OPUS_GET_IN_DTX = OPUS_GET_IN_DTX_REQUEST;
static const int PARLEY_OPUS_GET_LAST_PACKET_DURATION = OPUS_GET_LAST_PACKET_DURATION_REQUEST;
static const int PARLEY_OPUS_SET_GAIN = OPUS_SET_GAIN_REQUEST;

#endif
