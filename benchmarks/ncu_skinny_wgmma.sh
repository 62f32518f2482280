# One Nsight Compute profile (--set full) of a skinny_wgmma configuration at 64x4096x4096, with its stall breakdown
# (benchmarks/ncu_stalls.py) and warp samples by region of the SASS (benchmarks/ncu_regions.py):
#   bash benchmarks/ncu_skinny_wgmma.sh '{"WG": 2, "MB": 64, ...}'   (in a benchmarks/gpu_steps.sh step: $RESULTS)
set -u
P="$1"
ncu --clock-control none -k regex:skinny_wgmma --launch-skip 3 --launch-count 1 --set full --import-source no \
  -o "$RESULTS/w64" python3 benchmarks/launch_config.py gemm skinny_wgmma 64x4096x4096 "$P" > /dev/null || exit 1
ncu -i "$RESULTS/w64.ncu-rep" --page raw --csv | python3 benchmarks/ncu_stalls.py > "$RESULTS/w64_stalls.txt"
ncu -i "$RESULTS/w64.ncu-rep" --page details > "$RESULTS/w64_details.txt"
ncu -i "$RESULTS/w64.ncu-rep" --page source --print-source sass --csv > "$RESULTS/w64_src.csv"
python3 benchmarks/ncu_regions.py "$RESULTS/w64_src.csv" > "$RESULTS/w64_regions.txt"
head -14 "$RESULTS/w64_regions.txt"
