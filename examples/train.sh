#!/bin/sh
# A stand-in for a training run: what a sweep task looks like. It reports
# the GPU it was given and a made-up final loss for its hyper-parameters.
#	train.sh --lr 0.01 --batch 64
set -eu
lr=0.1 batch=32
while [ $# -gt 0 ]; do
	case "$1" in
	--lr) lr=$2; shift 2 ;;
	--batch) batch=$2; shift 2 ;;
	*) echo "train.sh: unknown option '$1'" >&2; exit 2 ;;
	esac
done
sleep 0.2
awk -v lr="$lr" -v b="$batch" -v gpu="${CUDA_VISIBLE_DEVICES:-none}" \
    -v task="${GPUPOOL_TASK:-?}" 'BEGIN {
	loss = (log(lr) / log(10) + 2.5) ^ 2 / 4 + 32 / b * 0.05 + 0.1
	printf "task %2s  lr=%-6s batch=%-4s GPU %-8s loss %.4f\n", task, lr, b, gpu, loss
}'
