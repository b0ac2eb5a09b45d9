# The sweep of benchmarks/panel_phases.c run on the H200 host (16 cores): every scheduling
# for the tile shapes the heuristic picks and their neighbours. JSON lines on stdout.
P=build/benchmarks/panel_phases
for s in pool pooldyn omp ompdyn; do
$P f64 1024 1024 1024 16 21 256x256,128x256,128x128 kept $s
$P f64 2048 2048 2048 16 7 512x512,256x256,256x128 kept $s
$P f64 16384 512 128 16 15 256x512,128x512 kept $s
$P f64 8192 1024 64 16 15 128x1024,128x512 kept $s
$P f32 1024 1024 1024 16 21 256x256,128x128 kept $s
done
$P f64 1024 1024 1024 16 21 256x256,128x128 fresh omp
$P f64 1024 1024 1024 16 21 256x256,128x128 fresh ompdyn
