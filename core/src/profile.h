/* profile.h : the machine profile behind FM_EXECUTION_BEST (core/src/profile.c: the model, its
 * text form; core/src/calibrate.c: measuring it; core/src/dispatch.c: the choice). */
#ifndef FM_PROFILE_H
#define FM_PROFILE_H

#include "internal.h"

#define FM_PROFILE_MAX_POINTS 8
#define FM_PROFILE_MAX_CURVES 48

/* Which curve of an operation (fm_operation.curve's variant) a prediction reads: op | variant << 8. */
#define FM_PROFILE_CURVE(op, variant) ((int)(op) | (int)(variant) << 8)

/* Seconds of one call of `work` units (fm_operation.work) of op in dtype on a device type, measured
 * at a few sizes, ascending in work; op is FM_PROFILE_CURVE(op, variant). */
typedef struct fm_rate_curve {
    int32_t op, dtype, device;
    int32_t n;
    double work[FM_PROFILE_MAX_POINTS], seconds[FM_PROFILE_MAX_POINTS];
} fm_rate_curve;

typedef struct fm_profile {
    struct fm_profile *retired; /* the context's earlier profiles (freed with it: plans being built may read them) */
    char fingerprint[256];      /* fm_profile_fingerprint when measured */
    char source[160];           /* "calibrated 2026-12-02 14:03 UTC (quick)" */
    int threads;                /* the context's cpu threads when measured */
    double copy_latency[2];     /* seconds per copy: [0] host->device, [1] device->host (pageable) */
    double copy_rate[2];        /* bytes per second, likewise */
    double touch_rate;          /* bytes per second of a cpu result's first touch (0: not measured) */
    int ncurves;
    fm_rate_curve curves[FM_PROFILE_MAX_CURVES];
    /* Split execution's two sides run at once and slow each other (cores, memory bandwidth): per
     * operation, [0] the cpu part's speed while host <-> GPU copies run, [1] the copies' speed while
     * the cpu part runs, each a fraction of its speed alone (calibrate's concurrent run); 0: not
     * measured, and best does not split that operation. */
    double concurrency[FM_OP_COUNT_][2];
} fm_profile;

/* What identifies this machine and build ("fusemath 0.1.0 cpu '<model>' x16 cuda 1 '<gpu>'"). */
void fm_profile_fingerprint(char *buf, size_t size);
/* Predicted seconds of one call of curve (FM_PROFILE_CURVE(op, variant); a plain op is variant 0) in
 * dtype of `work` units on the cpu (cuda = 0, at `threads` threads) or a cuda device; pf NULL: the
 * built-in model. */
double fm_profile_predict(const fm_profile *pf, int threads, int curve, fm_dtype dtype, int cuda, double work);
/* Seconds a cpu call pays for the first touch of a result's fresh pages (a NumPy result allocated for
 * the call), as the device->host rate already counts it; 0 without a measured rate. */
double fm_profile_touch_time(const fm_profile *pf, double bytes);
/* Seconds to copy bytes host->device (dir 0) or device->host (dir 1); 0 for 0 bytes. */
double fm_profile_copy_time(const fm_profile *pf, int dir, double bytes);

/* The text form (malloc'd, NUL-terminated) and its parse: FM_ERR_INVALID_ARGUMENT with a message
 * for a corrupt text or one measured elsewhere (fingerprint mismatch). */
fm_status fm_profile_format(const fm_profile *pf, char **text);
fm_status fm_profile_parse(const char *text, const char *where, fm_profile *pf);

/* The context's profile (NULL: none, the built-in model); install takes ownership of pf (the
 * previous one is retired, the plan cache cleared), note records why a file was ignored. */
const fm_profile *fm_context_profile(const fm_context *ctx);
void fm_context_profile_install(fm_context *ctx, fm_profile *pf);
void fm_context_profile_note(fm_context *ctx, const char *fmt, ...);
/* Parse text and install it, or record (and log) why not: the profile a file or a wisdom blob
 * carries is never trusted blindly, and never an error. */
void fm_context_profile_import(fm_context *ctx, const char *text, const char *where);
/* <cache dir>/machine-profile: written whole then renamed; read at context creation. */
fm_status fm_profile_save_file(const fm_context *ctx, const fm_profile *pf);
void fm_context_profile_load_default(fm_context *ctx);
void fm_context_profile_free_all(fm_context *ctx);

#endif
