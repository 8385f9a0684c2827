//! Criterion benches of the hash tables at modest sizes on the CPU backend (and the GPU where
//! the `cuda` feature is on and a device is present): build, find and count + retrieve for each
//! table kind, on unique 4-byte keys with every probe a hit. For the full sweep with floors,
//! use `joinkit-bench hashtable`.

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use joinkit_cuda::{CpuBackend, hash::hash64};
use joinkit_hashtable::{HashTables, Probing, TableConfig};

const N: usize = 1 << 18;

fn bench_backend<B: HashTables>(c: &mut Criterion, name: &str, b: &B) {
    let mut g = c.benchmark_group(name);
    g.throughput(Throughput::Elements(N as u64));
    g.sample_size(10);
    // Distinct keys (an odd multiplier is a bijection), probes drawn from them.
    let build: Vec<u32> = (0..N as u32).map(|i| i.wrapping_mul(0x9e37_79b1)).collect();
    let probe: Vec<u32> = (0..N as u64)
        .map(|j| build[(hash64(j, 3) % N as u64) as usize])
        .collect();
    let (keys, probe) = (b.upload(&build).unwrap(), b.upload(&probe).unwrap());
    let configs = [
        ("key_value linear", TableConfig::key_value()),
        (
            "key_value double",
            TableConfig::key_value().probing(Probing::Double),
        ),
        ("hash_row linear", TableConfig::hash_row()),
        ("chained", TableConfig::chained()),
    ];
    for (label, config) in configs {
        g.bench_function(format!("build {label}"), |x| {
            x.iter(|| {
                let t = b.build_table(&keys, &config).unwrap();
                b.synchronize().unwrap();
                t.capacity()
            })
        });
        let table = b.build_table(&keys, &config).unwrap();
        g.bench_function(format!("find {label}"), |x| {
            x.iter(|| {
                let r = b.find(&table, &probe).unwrap();
                b.synchronize().unwrap();
                r
            })
        });
        g.bench_function(format!("count+retrieve {label}"), |x| {
            x.iter(|| {
                let r = b.probe_pairs(&table, &probe).unwrap();
                b.synchronize().unwrap();
                r
            })
        });
    }
    g.finish();
}

fn benches(c: &mut Criterion) {
    bench_backend(c, "cpu", &CpuBackend::new());
    #[cfg(feature = "cuda")]
    if let Ok(g) = joinkit_cuda::CudaBackend::new(0) {
        bench_backend(c, "cuda", &g);
    }
}

criterion_group!(hashtable, benches);
criterion_main!(hashtable);
