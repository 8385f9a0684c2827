//! `CudaBackend::close`: with another backend alive on the device it only drops the backend;
//! the last one destroys the device's context, and a backend opened afterwards works on a new
//! one (the kernel modules loaded again). A file of its own: the test runs alone in its
//! process, since destroying the context would break backends of tests running beside it.

#[cfg(feature = "cuda")]
#[test]
fn closing_the_last_backend_leaves_the_device_usable() {
    use joinkit_cuda::{Backend, CudaBackend};

    let Some(first) =
        joinkit_cuda::testing::cuda_or_skip("closing_the_last_backend_leaves_the_device_usable")
    else {
        return;
    };
    // Work that loads kernels and moves data, on a backend and the buffers it keeps.
    let works = |b: &CudaBackend, n: usize| {
        let mut ids = b.alloc::<u64>(n).unwrap();
        b.iota(&mut ids, 5).unwrap();
        let host: Vec<u32> = (0..n as u32)
            .map(|i| i.wrapping_mul(2_654_435_761))
            .collect();
        let up = b.upload(&host).unwrap();
        assert_eq!(
            b.download(&ids).unwrap(),
            (5..5 + n as u64).collect::<Vec<_>>()
        );
        assert_eq!(b.download(&up).unwrap(), host);
    };
    works(&first, 1000);
    let second = CudaBackend::new(first.info().ordinal).unwrap();
    works(&second, 3);
    let kept = first.upload(&[7u64, 8, 9]).unwrap();
    // SAFETY: `first` is alive, so this only drops `second` (which has no live buffers).
    unsafe { second.close() };
    works(&first, 1 << 20);
    assert_eq!(first.download(&kept).unwrap(), vec![7, 8, 9]);
    drop(kept);
    // SAFETY: the last backend, with no buffers alive; nothing else in this process uses the
    // device.
    unsafe { first.close() };
    let reopened = joinkit_cuda::testing::cuda_or_skip("reopened").unwrap();
    works(&reopened, 1 << 20);
    works(&reopened, 1);
}
