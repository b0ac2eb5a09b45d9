import json,sys
for l in open(sys.argv[1]):
    try: d=json.loads(l)
    except Exception: print(l.strip()); continue
    p=d['plain']; f=d['fused3']
    print(d['dtype'],f"{d['m']}x{d['n']}x{d['k']}",d['sched'],d['tile'],'fresh' if d['fresh_d'] else 'kept','plain %.3f [start %.3f busy %.3f max %.3f end %.3f] f3 %.3f [busy %.3f max %.3f] f3/plain %.3f pre %.3f gemm %.3f pass %.3f (plain gemm %.3f) f2 %.3f [pass %.3f]'%(p['ms'],p['last_start_ms'],p['mean_busy_ms'],p['max_busy_ms'],p['last_end_ms'],f['ms'],f['mean_busy_ms'],f['max_busy_ms'],f['over_plain'],f['preload_ms'],f['gemm_ms'],f['pass_ms'],p['gemm_ms'],d['fused2']['ms'],d['fused2']['pass_ms']))
    if 'plain_thread_busy_ms' in d:
        print('   per thread busy', d['plain_thread_busy_ms'])
        print('   cpus', d['plain_thread_cpu'])
