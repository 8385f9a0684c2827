# Copy-engine all-to-all across the GPUs of one process (CuPy): pull or push, one stream or one per
# peer, and beside a memory-bound kernel; the first look behind joinkit_comm::peer::PeerComm
# (docs/results/distributed.md, sixth session). Usage: python3 copy-engine-a2a.py [bytes a rank]
import cupy as cp, time, sys
rt = cp.cuda.runtime
n = rt.getDeviceCount()
print("gpus", n, [rt.getDeviceProperties(i)["name"].decode() for i in range(n)])
for i in range(n):
    with cp.cuda.Device(i):
        for j in range(n):
            if i != j:
                print(i, j, "canAccessPeer", rt.deviceCanAccessPeer(i, j))
                rt.deviceEnablePeerAccess(j)
def sync_all():
    for i in range(n):
        with cp.cuda.Device(i): cp.cuda.Device(i).synchronize()
per_rank = int(sys.argv[1]) if len(sys.argv) > 1 else 2_420_000_000
seg = (per_rank // n) // 256 * 256
send, recv, streams, pstreams = [], [], [], []
for i in range(n):
    with cp.cuda.Device(i):
        send.append(cp.random.randint(0, 1 << 30, size=seg * n // 4, dtype=cp.uint32))
        recv.append(cp.empty(seg * n // 4, dtype=cp.uint32))
        streams.append(cp.cuda.Stream(non_blocking=True))
        pstreams.append([cp.cuda.Stream(non_blocking=True) for _ in range(n)])
sync_all()
def a2a(mode):
    # pull: receiver r copies from peer (r+k)%n at step k, on one stream (serial) or a stream per peer
    for r in range(n):
        with cp.cuda.Device(r):
            for k in range(n):
                p = (r + k) % n
                src = send[p].data.ptr + r * seg
                dst = recv[r].data.ptr + p * seg
                if mode == "pull-serial":
                    s = streams[r]
                    rt.memcpyPeerAsync(dst, r, src, p, seg, s.ptr)
                elif mode == "pull-streams":
                    s = pstreams[r][k]
                    rt.memcpyPeerAsync(dst, r, src, p, seg, s.ptr)
                elif mode == "push-streams":
                    # sender r pushes its segment for peer p
                    dst2 = recv[p].data.ptr + r * seg
                    src2 = send[r].data.ptr + p * seg
                    rt.memcpyPeerAsync(dst2, p, src2, r, seg, pstreams[r][k].ptr)
    sync_all()
def timeit(f, reps=10):
    f(); f()
    ts = []
    for _ in range(reps):
        t = time.perf_counter(); f(); ts.append(time.perf_counter() - t)
    ts.sort(); return ts[len(ts)//2]
res = {}
for mode in ["pull-serial", "pull-streams", "push-streams"]:
    t = timeit(lambda: a2a(mode))
    sent = seg * (n - 1)  # bytes a rank sends to peers
    res[mode] = t
    print(f"{mode}: {t*1e3:.2f} ms, {sent/t/1e9:.0f} GB/s a rank (peers only), {seg*n/t/1e9:.0f} incl. self")
# overlap with a memory-bound kernel on each GPU
work = []
for i in range(n):
    with cp.cuda.Device(i):
        x = cp.arange(1 << 28, dtype=cp.uint64); y = cp.empty_like(x)
        work.append((x, y))
kern = cp.ElementwiseKernel("uint64 x", "uint64 y", "y = x * 2654435761ull + (x >> 7)", "mix")
def compute(reps=8):
    for i in range(n):
        with cp.cuda.Device(i):
            for _ in range(reps): kern(work[i][0], work[i][1])
def compute_only():
    compute(); sync_all()
tc = timeit(compute_only)
print(f"compute alone: {tc*1e3:.2f} ms ({8*2*8*(1<<28)/tc/1e12:.2f} TB/s a GPU)")
for mode in ["pull-streams", "push-streams"]:
    def both():
        compute()  # queued on the default stream of each device
        a2a(mode)
    tb = timeit(both)
    print(f"compute + {mode} together: {tb*1e3:.2f} ms (a2a alone {res[mode]*1e3:.2f}, compute alone {tc*1e3:.2f})")
