//! The backend contract, checked on the CPU backend always and on CUDA where a GPU is present:
//! both must produce the same bits and the same errors.

use joinkit_cuda::{Backend, Buffer, CpuBackend, Device, DeviceKind, Element, Error, hash};

/// Runs the contract checks on one backend.
fn contract<B: Backend>(b: &B) {
    // Round trip, including empty and odd sizes.
    for n in [0usize, 1, 3, 1001] {
        let host: Vec<u64> = (0..n as u64).map(|i| hash::hash64(i, 7)).collect();
        let buf = b.upload(&host).unwrap();
        assert_eq!(b.download(&buf).unwrap(), host, "round trip n={n}");
        // The owned forms carry the same values (the CPU's without a copy).
        let owned = b.upload_owned(host.clone()).unwrap();
        assert_eq!(
            b.download_owned(owned).unwrap(),
            host,
            "owned round trip n={n}"
        );
    }
    // fill, iota and fill_random agree with their host definitions, for every element type.
    check_generators::<B, u32>(b);
    check_generators::<B, u64>(b);
    check_generators::<B, i32>(b);
    check_generators::<B, i64>(b);
    // copy, and its length check.
    let src = b.upload(&[5u32, 6, 7]).unwrap();
    let mut dst = b.alloc::<u32>(3).unwrap();
    b.copy(&src, &mut dst).unwrap();
    assert_eq!(b.download(&dst).unwrap(), vec![5, 6, 7]);
    let mut short = b.alloc::<u32>(2).unwrap();
    assert_eq!(
        b.copy(&src, &mut short),
        Err(Error::LengthMismatch {
            what: "copy source vs destination",
            left: 3,
            right: 2
        })
    );
    // copy_into places a part at an offset, and refuses what does not fit.
    let mut big = b.alloc::<u32>(6).unwrap();
    b.fill(&mut big, 9).unwrap();
    b.copy_into(&src, &mut big, 2).unwrap();
    assert_eq!(b.download(&big).unwrap(), vec![9, 9, 5, 6, 7, 9]);
    assert_eq!(
        b.copy_into(&src, &mut big, 4),
        Err(Error::OutputTooLarge {
            needed: 7,
            capacity: 6
        })
    );
    // Sizes whose byte count overflows are a typed error, not a panic or a wrap.
    assert_eq!(
        b.alloc::<u64>(usize::MAX / 4).err(),
        Some(Error::SizeOverflow("buffer size in bytes"))
    );
    // Packed ids unpack into rank << 32 | row at every split, empty included; past 32 bits is
    // a typed error.
    let packed: Vec<u32> = (0..4099u64)
        .map(|i| hash::hash64(i, 5) as u32)
        .chain([0, u32::MAX])
        .collect();
    // Odd and even lengths around the kernel's two ids a step, and a long odd one.
    for len in [1, 2, 3, 4, 5, packed.len()] {
        let part = &packed[packed.len() - len..];
        let buf = b.upload(part).unwrap();
        for low_bits in [0u32, 1, 17, 28, 31, 32] {
            let want: Vec<u64> = part
                .iter()
                .map(|&v| {
                    let v = u64::from(v);
                    ((v >> low_bits) << 32) | (v & ((1u64 << low_bits) - 1))
                })
                .collect();
            assert_eq!(
                b.download(&b.unpack_ids(&buf, low_bits).unwrap()).unwrap(),
                want,
                "{len} ids, low bits {low_bits}"
            );
        }
    }
    let buf = b.upload(&packed).unwrap();
    assert!(
        b.unpack_ids(&b.alloc::<u32>(0).unwrap(), 9)
            .unwrap()
            .is_empty()
    );
    assert!(matches!(
        b.unpack_ids(&buf, 33),
        Err(Error::InvalidArgument(_))
    ));
    // Timing returns the work's result.
    let (v, ms) = b.timed(|| Ok(42)).unwrap();
    assert_eq!(v, 42);
    assert!(ms >= 0.0);
}

fn check_generators<B: Backend, T: Element>(b: &B) {
    let n = 4099;
    let mut buf = b.alloc::<T>(n).unwrap();
    b.fill(&mut buf, T::from_bits(0xDEAD_BEEF_DEAD_BEEF))
        .unwrap();
    assert!(
        b.download(&buf)
            .unwrap()
            .iter()
            .all(|&x| x == T::from_bits(0xDEAD_BEEF_DEAD_BEEF))
    );
    b.iota(&mut buf, u64::from(u32::MAX) - 5).unwrap();
    let want: Vec<T> = (0..n as u64)
        .map(|i| T::from_bits(u64::from(u32::MAX) - 5 + i))
        .collect();
    assert_eq!(b.download(&buf).unwrap(), want, "iota {}", T::NAME);
    b.fill_random(&mut buf, 99, 0xFFFF_FFFF_0000_FFFF).unwrap();
    let want: Vec<T> = (0..n as u64)
        .map(|i| T::from_bits(hash::hash64(i, 99) & 0xFFFF_FFFF_0000_FFFF))
        .collect();
    assert_eq!(b.download(&buf).unwrap(), want, "fill_random {}", T::NAME);
}

#[test]
fn cpu_backend_meets_the_contract() {
    contract(&CpuBackend::new());
}

#[cfg(feature = "cuda")]
#[test]
fn cuda_backend_meets_the_contract() {
    let Some(gpu) = joinkit_cuda::testing::cuda_or_skip("cuda_backend_meets_the_contract") else {
        return;
    };
    contract(&gpu);
    // Device memory is accounted: a 1 MiB buffer shows up in the peak.
    gpu.reset_peak_memory();
    let before = gpu.memory().unwrap();
    let big = gpu.alloc::<u64>(1 << 17).unwrap();
    let during = gpu.memory().unwrap();
    assert_eq!(during.current_bytes, before.current_bytes + (1 << 20));
    drop(big);
    let after = gpu.memory().unwrap();
    assert_eq!(after.current_bytes, before.current_bytes);
    assert!(after.peak_bytes >= before.current_bytes + (1 << 20));
    // A side stream's buffers count in the same figures, and its work is its own stream's.
    let side = gpu.side_stream().unwrap();
    contract(&side);
    let on_side = side.alloc::<u64>(1 << 17).unwrap();
    assert_eq!(
        gpu.memory().unwrap().current_bytes,
        before.current_bytes + (1 << 20)
    );
    drop(on_side);
    assert_eq!(gpu.memory().unwrap().current_bytes, before.current_bytes);
}

/// Elements read back through the mapped word equal the download, at every position and both
/// widths (a u32 after a u64 leaves no stale high bytes); past the end is a typed error.
#[cfg(feature = "cuda")]
#[test]
fn elements_read_back_one_by_one() {
    let Some(gpu) = joinkit_cuda::testing::cuda_or_skip("elements_read_back_one_by_one") else {
        return;
    };
    let wide: Vec<u64> = (0..1000u64)
        .map(|i| i.wrapping_mul(0x9E37_79B9_7F4A_7C15))
        .collect();
    let narrow: Vec<u32> = wide.iter().map(|&x| (x >> 7) as u32).collect();
    let (w, n) = (gpu.upload(&wide).unwrap(), gpu.upload(&narrow).unwrap());
    for i in (0..1000).step_by(37).chain([999]) {
        assert_eq!(gpu.read_element(&w.view(), i).unwrap(), wide[i]);
        assert_eq!(gpu.read_element(&n.view(), i).unwrap(), narrow[i]);
    }
    assert!(matches!(
        gpu.read_element(&n.view(), 1000),
        Err(joinkit_cuda::Error::IndexOutOfRange { .. })
    ));
}

/// A freed buffer goes to the backend's cache and comes back for the next request of its size
/// in bytes; the cache keeps to its limit, oldest first, and is not counted as used memory.
/// The cache test and the out-of-memory test run one at a time: a failed allocation empties
/// every cache on the device, the cache test's too.
#[cfg(feature = "cuda")]
static DEVICE_CACHES: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[cfg(feature = "cuda")]
#[test]
fn freed_buffers_come_back_at_their_size() {
    let _alone = DEVICE_CACHES.lock().unwrap_or_else(|p| p.into_inner());
    let Some(gpu) = joinkit_cuda::testing::cuda_or_skip("freed_buffers_come_back_at_their_size")
    else {
        return;
    };
    const MIB: usize = 1 << 20;
    gpu.set_buffer_cache_limit(3 * MIB / 2);
    let used = gpu.memory().unwrap().current_bytes;
    let first = gpu.alloc::<u64>(MIB / 8).unwrap();
    let address = first.device_ptr();
    drop(first);
    assert_eq!(gpu.buffer_cache_bytes(), MIB);
    assert_eq!(gpu.memory().unwrap().current_bytes, used);
    // Another size leaves it; the same bytes as another element type take it, as a working
    // buffer.
    let other = gpu.alloc::<u32>(MIB / 8).unwrap();
    assert_eq!(gpu.buffer_cache_bytes(), MIB);
    let mut again = gpu.alloc::<u32>(MIB / 4).unwrap();
    assert_eq!(again.device_ptr(), address);
    assert_eq!(gpu.buffer_cache_bytes(), 0);
    assert_eq!(gpu.memory().unwrap().current_bytes, used + MIB + MIB / 2);
    gpu.fill(&mut again, 7).unwrap();
    assert!(gpu.download(&again).unwrap().iter().all(|&x| x == 7));
    // Up to the limit everything is kept; over it the oldest kept allocation goes back to the
    // driver; one larger than the limit is never kept.
    drop(again);
    drop(other);
    assert_eq!(gpu.buffer_cache_bytes(), 3 * MIB / 2);
    drop(gpu.alloc::<u64>(3 * MIB / 32).unwrap());
    assert_eq!(gpu.buffer_cache_bytes(), MIB / 2 + 3 * MIB / 4);
    drop(gpu.alloc::<u64>(MIB / 4).unwrap());
    assert_eq!(gpu.buffer_cache_bytes(), MIB / 2 + 3 * MIB / 4);
    // A limit of 0 releases everything and keeps nothing.
    gpu.set_buffer_cache_limit(0);
    assert_eq!(gpu.buffer_cache_bytes(), 0);
    drop(gpu.alloc::<u32>(16).unwrap());
    assert_eq!(gpu.buffer_cache_bytes(), 0);
}

#[cfg(feature = "cuda")]
#[test]
fn request_beyond_free_device_memory_is_a_typed_error() {
    let _alone = DEVICE_CACHES.lock().unwrap_or_else(|p| p.into_inner());
    let Some(gpu) = joinkit_cuda::testing::cuda_or_skip("request_beyond_free_device_memory") else {
        return;
    };
    let (free, total) = gpu.mem_info().unwrap();
    let n = (free / 8) + (1 << 30);
    match gpu.alloc::<u64>(n) {
        Err(Error::OutOfDeviceMemory {
            requested,
            total: t,
            ..
        }) => {
            assert_eq!(requested, n * 8);
            assert_eq!(t, total);
        }
        other => panic!(
            "expected OutOfDeviceMemory, got {:?}",
            other.map(|b| b.len())
        ),
    }
    // The backend still works afterwards.
    let b = gpu.upload(&[1u32, 2]).unwrap();
    assert_eq!(gpu.download(&b).unwrap(), vec![1, 2]);
}

#[test]
fn device_specs() {
    assert!(matches!(Device::from_spec("cpu"), Ok(Device::Cpu(_))));
    assert!(matches!(
        Device::from_spec("tpu:0"),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        Device::from_spec("cuda:x"),
        Err(Error::InvalidArgument(_))
    ));
    // A device that does not exist is NoDevice on every build (no CUDA support, no driver, or
    // fewer devices).
    assert!(matches!(
        Device::from_spec("cuda:4096"),
        Err(Error::NoDevice(_))
    ));
}

/// Without a usable GPU (no libcuda, or a CPU-only build) the best device is the CPU: a binary
/// built with `cuda` still starts and runs.
#[test]
fn best_device_falls_back_to_the_cpu() {
    let device = Device::best();
    let kind = joinkit_cuda::with_backend!(&device, b => b.kind());
    let gpu_usable =
        cfg!(feature = "cuda") && std::env::var("JOINKIT_DEVICE").is_err() && gpu_present();
    if gpu_usable {
        assert_eq!(kind, DeviceKind::Cuda(0));
    } else if std::env::var("JOINKIT_DEVICE").is_err() {
        assert_eq!(kind, DeviceKind::Cpu);
    }
    eprintln!("best device: {}", device.describe());
}

fn gpu_present() -> bool {
    #[cfg(feature = "cuda")]
    {
        joinkit_cuda::device_count().is_ok_and(|n| n > 0)
    }
    #[cfg(not(feature = "cuda"))]
    {
        false
    }
}
