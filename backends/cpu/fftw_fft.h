/* fftw_fft.h : what the FFTW backend shows its tests (tests/c/test_fft_cpu.c). */
#ifndef FM_FFTW_FFT_H
#define FM_FFTW_FFT_H

/* The path the calling thread's last execute of an FFTW plan took: FFTW's plan on the
 * caller's arrays (out of place, or in place), or the library's chunks / columns. */
enum { FM_FFTW_RAN_NOTHING, FM_FFTW_RAN_DIRECT, FM_FFTW_RAN_DIRECT_INPLACE, FM_FFTW_RAN_CHUNKS };
int fm_fftw_last_path(void);

#endif
