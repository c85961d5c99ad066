#ifndef PARLEY_CALSA_SHIM_H
#define PARLEY_CALSA_SHIM_H
#include <alsa/asoundlib.h>
// The ioplug API, for `ClockedPCM`: an in-process PCM with its own clock, which lets tests
// produce real xruns on a machine with no sound card.
#include <alsa/pcm_external.h>
#include <sys/timerfd.h>
#include <poll.h>

// alsa-lib's error handler is variadic; this installs one that discards messages so
// a library that is only probing devices does not print to the user's terminal.
static inline void parley_alsa_silent_handler(const char *file, int line, const char *function, int err, const char *fmt, ...) {
    (void)file; (void)line; (void)function; (void)err; (void)fmt;
}
static inline int parley_alsa_silence_errors(void) {
    return snd_lib_error_set_handler(parley_alsa_silent_handler);
}

#endif
