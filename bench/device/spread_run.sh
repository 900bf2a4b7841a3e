S=$(date +%s); mkdir -p /tmp/site && tar -xJf .devpack/site.tar.xz -C /tmp/site || exit 1
export PYTHONPATH=/tmp/site SDL_VIDEODRIVER=dummy CUDA_VISIBLE_DEVICES= PYTHONUNBUFFERED=1 RAY_DEFAULT_OBJECT_STORE_MEMORY_PROPORTION=0.02
(nproc; lscpu; free -g; df -h /dev/shm; python3 -c 'import os,sys,torch,numpy,ray,gymnasium,pettingzoo,mpe2;print(sys.version,torch.__version__,numpy.__version__,ray.__version__,gymnasium.__version__,pettingzoo.__version__,sorted(os.sched_getaffinity(0)))') >$OUT/env.txt 2>&1
C=($(python3 -c 'import os;print(*sorted(os.sched_getaffinity(0)))'))
pin(){ c=$1; shift; python3 -c 'import os,sys;os.sched_setaffinity(0,[int(x) for x in sys.argv[1].split(",")]);os.execvp(sys.argv[2],sys.argv[2:])' "$c" "$@"; }
P=()
for s in 0 1 2; do
 mkdir -p /tmp/ro$s /tmp/rr$s
 RAY_TMPDIR=/tmp/ro$s pin ${C[2*s]},${C[2*s+1]} python3 .devpack/src/bench/multi_agent_spread_ppo.py --seed $s --lr 3e-4 --env-steps 100000 >$OUT/ours$s.log 2>&1 & P+=($!); sleep 2
 RAY_TMPDIR=/tmp/rr$s pin ${C[6+2*s]},${C[7+2*s]} python3 .devpack/src/bench/rllib_spread_ppo.py --seed $s --env-steps 100000 --max-seconds 470 >$OUT/rllib$s.log 2>&1 & P+=($!); sleep 2
done
echo "launched $(( $(date +%s)-S )) s; cpus ${C[*]}"
while [ -n "$(jobs -r)" ] && [ $(( $(date +%s)-S )) -lt 545 ]; do sleep 5; done
echo "waited $(( $(date +%s)-S )) s; still running: $(jobs -rp | wc -l)"
for p in ${P[@]}; do pkill -TERM -P $p; done 2>/dev/null
cat $OUT/env.txt | head -3
for f in $OUT/ours*.log $OUT/rllib*.log; do echo "== $f"; grep -E '^(iter|per agent|after|\[rllib\]|\{"seed)|Error|error' $f | grep -v '^{"seed' | tail -14; grep '^{"seed' $f | cut -c1-400; done
