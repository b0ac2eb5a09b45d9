# Small tiles on the H200 host: OpenBLAS's unpacked paths for small calls (f64 small-matrix kernels at M*N*K <= 1e6, f32 "direct" sgemm) against the heuristic's tiles.
P=build/benchmarks/panel_phases
for fr in kept fresh; do
$P f64 8192 1024 64 16 15 128x1024,32x256,64x128,16x512,32x512,64x256 $fr omp
$P f64 16384 512 128 16 15 256x512,32x128,64x64,16x512,32x256,64x128 $fr omp
$P f32 8192 1024 64 16 15 128x1024,64x1024,32x1024,64x512,112x1024 $fr omp
$P f32 16384 512 128 16 15 256x512,64x512,96x512,32x512,128x256 $fr omp
done
