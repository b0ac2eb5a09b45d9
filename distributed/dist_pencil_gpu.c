/* dist_pencil_gpu.c : pencil decompositions on GPU ranks, in the GPU module libfusemath_mpi_cuda.so
 * (docs/design.md, Distributed, Pencils and GPU ranks): dist_pencil.c itself, its three primitives (the
 * local plans, the box copies, the exchanges) chosen for the device, so that the algorithm is written
 * once. Reached from libfusemath_mpi through fm_dist_gpu_ops (dist_gpu.h, dist_fft_gpu.c's table). */
#define FM_DIST_PENCIL_GPU 1
#include "dist_pencil.c"
