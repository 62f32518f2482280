# One Nsight Compute source-counter profile of a batch-1 56x56x64 fp32 winograd configuration, for
# benchmarks/ncu_regions.py:  bash benchmarks/ncu_source.sh NAME '{"TILES": 24, ...}'  (writes $RESULTS/NAME*)
# usage: bash benchmarks/ncu_source.sh NAME JSON  (in a benchmarks/gpu_steps.sh step, which sets $RESULTS)
set -u
name=$1; params=$2
ncu --clock-control none -k regex:winograd --launch-skip 2 --launch-count 1 --section SourceCounters --section WarpStateStats --section SchedulerStats --section LaunchStats -o $RESULTS/$name python3 benchmarks/profile_conv_b1.py "$params" || exit 1
ncu -i $RESULTS/$name.ncu-rep --page source --print-source sass --csv > $RESULTS/${name}_src.csv
ncu -i $RESULTS/$name.ncu-rep --page details > $RESULTS/${name}_details.txt
tail -40 $RESULTS/${name}_details.txt
