//! Criterion benches of the primitives at modest sizes on the CPU backend (and the GPU where
//! the `cuda` feature is on and a device is present): sort-pairs, gather by clustered and
//! random maps, compaction, interleaving of two u32 columns, bounds and range expansion.

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use joinkit_cuda::{CpuBackend, hash::hash64};
use joinkit_primitives::{Bounds, Compact, Gather, Interleave, MergePath, Sort};

const N: usize = 1 << 20;

fn bench_backend<B: Sort + Gather + Compact + Interleave + MergePath>(
    c: &mut Criterion,
    name: &str,
    b: &B,
) {
    let mut g = c.benchmark_group(name);
    g.throughput(Throughput::Elements(N as u64));
    g.sample_size(10);
    let keys: Vec<u32> = (0..N as u64).map(|i| hash64(i, 1) as u32).collect();
    let ids: Vec<u32> = (0..N as u32).collect();
    let (dk, di) = (b.upload(&keys).unwrap(), b.upload(&ids).unwrap());
    g.bench_function("sort_pairs u32/u32", |x| {
        x.iter(|| {
            let r = b.sort_pairs(&dk, &di, 0..32).unwrap();
            b.synchronize().unwrap();
            r
        })
    });
    let (_, perm) = b.sort_pairs(&dk, &di, 0..32).unwrap();
    let half = b
        .upload(&ids.iter().map(|i| i / 2).collect::<Vec<u32>>())
        .unwrap();
    let mut out = b.alloc::<u32>(N).unwrap();
    for (map_name, map) in [("half", &half), ("random", &perm)] {
        g.bench_function(format!("gather u32 by {map_name}"), |x| {
            x.iter(|| {
                b.gather_into(&dk, map, &mut out, Bounds::Trust).unwrap();
                b.synchronize().unwrap();
            })
        });
    }
    let flags = b
        .upload(&keys.iter().map(|k| k & 1).collect::<Vec<u32>>())
        .unwrap();
    g.bench_function("compact 2 x u32", |x| {
        x.iter(|| b.compact(&[&dk, &di], &flags).unwrap())
    });
    g.bench_function("interleave + deinterleave u32", |x| {
        x.iter(|| {
            let words = b.interleave(&dk, &di).unwrap();
            let r = b.deinterleave(&words).unwrap();
            b.synchronize().unwrap();
            r
        })
    });
    let (sorted, _) = b.sort_pairs(&dk, &di, 0..32).unwrap();
    g.bench_function("sorted_bounds + expand", |x| {
        x.iter(|| {
            let (l, u) = b.sorted_bounds::<u32, u32>(&sorted, &sorted).unwrap();
            b.expand_ranges(&l, &u).unwrap()
        })
    });
    g.finish();
}

fn benches(c: &mut Criterion) {
    bench_backend(c, "cpu", &CpuBackend::new());
    #[cfg(feature = "cuda")]
    if let Ok(g) = joinkit_cuda::CudaBackend::new(0) {
        bench_backend(c, "cuda", &g);
    }
}

criterion_group!(primitives, benches);
criterion_main!(primitives);
