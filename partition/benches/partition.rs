//! Criterion benches at modest sizes: radix (one 8-bit pass and two passes), hash (fan-out 256
//! and 1000) and bucket-chain partitioning of u32 keys with one u32 payload, on the CPU and,
//! with `--features cuda` and a GPU, on CUDA. `joinkit-bench partition` measures the large
//! sizes and the fraction of copy bandwidth.

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use joinkit_cuda::CpuBackend;
use joinkit_partition::{
    BucketChainPartition, Column, HashPartition, Partitioner, RadixPartition, RowIds,
};

const SIZES: [usize; 2] = [1 << 16, 1 << 20];

/// A named operation to time.
type Case<'a> = (&'static str, Box<dyn Fn() + 'a>);

fn bench_backend<B>(c: &mut Criterion, name: &str, b: &B)
where
    B: RadixPartition + HashPartition + BucketChainPartition,
{
    let mut g = c.benchmark_group(format!("partition/{name}"));
    g.sample_size(10);
    for n in SIZES {
        let mut keys = b.alloc::<u32>(n).expect("alloc");
        b.fill_random(&mut keys, 7, u64::MAX).expect("fill");
        let mut vals = b.alloc::<u32>(n).expect("alloc");
        b.iota(&mut vals, 0).expect("iota");
        let cols = [Column::U32(vals)];
        g.throughput(Throughput::Elements(n as u64));
        let cases: [Case<'_>; 5] = [
            (
                "radix8",
                Box::new(|| drop(b.radix_partition(&keys, &cols, 0..8, RowIds::None))),
            ),
            (
                "radix16",
                Box::new(|| drop(b.radix_partition(&keys, &cols, 0..16, RowIds::None))),
            ),
            (
                "hash256",
                Box::new(|| drop(b.hash_partition(&keys, &cols, 256, 1, RowIds::None))),
            ),
            (
                "hash1000",
                Box::new(|| drop(b.hash_partition(&keys, &cols, 1000, 1, RowIds::None))),
            ),
            (
                "bucket256",
                Box::new(|| {
                    let by = Partitioner::Radix(0..8);
                    drop(b.bucket_chain_partition(&keys, &cols, &by, 4096, RowIds::None))
                }),
            ),
        ];
        for (op, run) in &cases {
            g.bench_with_input(BenchmarkId::new(*op, n), &n, |bench, _| {
                bench.iter(|| {
                    run();
                    b.synchronize().expect("synchronize");
                })
            });
        }
    }
    g.finish();
}

fn benches(c: &mut Criterion) {
    bench_backend(c, "cpu", &CpuBackend::new());
    #[cfg(feature = "cuda")]
    match joinkit_cuda::CudaBackend::new(0) {
        Ok(gpu) => bench_backend(c, "cuda", &gpu),
        Err(e) => eprintln!("partition benches: no GPU ({e}); CPU only"),
    }
}

criterion_group!(partition, benches);
criterion_main!(partition);
