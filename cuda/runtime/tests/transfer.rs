//! Large uploads and downloads on CUDA go through the backend's ring of pinned staging
//! buffers: every size around its thresholds and chunk boundaries round-trips, at both widths,
//! and from several threads at once, rayon jobs included (one may start a transfer inside
//! another's parallel copy, on the same thread); words the device posts to the host. GPU-only:
//! skipped visibly without a GPU.
#![cfg(feature = "cuda")]

use joinkit_cuda::testing::{POISON_U64, cuda_or_skip};
use joinkit_cuda::{
    Backend, CudaBackend, Element, NO_STAGING_ENV, STAGED_MIN_BYTES, STAGING_BUFFERS,
    STAGING_CHUNK_BYTES,
};

/// Elements of `T` in one staging chunk.
fn chunk<T: Element>() -> usize {
    STAGING_CHUNK_BYTES / size_of::<T>()
}

/// The sizes checked: empty, tiny, just below and at the staging threshold, a chunk and one
/// either side, and more chunks than the ring has buffers plus an odd remainder.
fn sizes<T: Element>() -> Vec<usize> {
    let min = STAGED_MIN_BYTES / size_of::<T>();
    let c = chunk::<T>();
    vec![
        0,
        1,
        1001,
        min - 1,
        min,
        c - 1,
        c,
        c + 1,
        (STAGING_BUFFERS + 2) * c + 4099,
    ]
}

/// `n` values that differ from position to position (a misplaced chunk shows).
fn data<T: Element>(n: usize, seed: u64) -> Vec<T> {
    (0..n as u64)
        .map(|i| T::from_bits((i ^ seed).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 7))
        .collect()
}

/// Asserts `got == want`, naming the first difference (not printing both columns).
fn same<T: Element>(got: &[T], want: &[T], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    if let Some(i) = got.iter().zip(want).position(|(g, w)| g != w) {
        panic!(
            "{what}: element {i} of {} is {:?}, expected {:?}",
            want.len(),
            got[i],
            want[i]
        );
    }
}

/// Whether the backends stage at all (see [`NO_STAGING_ENV`]).
fn staging_on() -> bool {
    !std::env::var(NO_STAGING_ENV).is_ok_and(|v| !v.is_empty() && v != "0")
}

/// Every size of [`sizes`] up and down, each direction checked on its own too: the upload by
/// elements read back through a kernel, the download of a column the device wrote itself.
fn round_trips<T: Element>(gpu: &CudaBackend) {
    let c = chunk::<T>();
    for n in sizes::<T>() {
        let what = format!("{} n={n}", T::NAME);
        // The ring is pinned once, by the backend's first large transfer (of any type).
        let staged_before = gpu.staging_bytes();
        let host = data::<T>(n, n as u64);
        let mut source = host.clone();
        let buf = gpu.upload(&source).unwrap();
        // The upload has read the host slice when it returns: writing it now changes nothing.
        source.fill(T::from_bits(POISON_U64));
        drop(source);
        for i in [0, c - 1, c, c + 1, 2 * c, n.wrapping_sub(1)] {
            if i < n {
                assert_eq!(
                    gpu.read_element(&buf.view(), i).unwrap(),
                    host[i],
                    "{what}: uploaded element {i}"
                );
            }
        }
        same(
            &gpu.download(&buf).unwrap(),
            &host,
            &format!("{what} round trip"),
        );
        // A column written on the device (iota) comes down right.
        let start = u64::from(u32::MAX) - 3;
        let mut written = gpu.alloc::<T>(n).unwrap();
        gpu.iota(&mut written, start).unwrap();
        let want: Vec<T> = (0..n as u64).map(|i| T::from_bits(start + i)).collect();
        same(
            &gpu.download(&written).unwrap(),
            &want,
            &format!("{what} iota"),
        );
        // Owned forms take the same paths.
        let owned = gpu.upload_owned(host.clone()).unwrap();
        same(
            &gpu.download_owned(owned).unwrap(),
            &host,
            &format!("{what} owned"),
        );
        if n * size_of::<T>() < STAGED_MIN_BYTES {
            assert_eq!(
                gpu.staging_bytes(),
                staged_before,
                "{what}: small transfers copy directly"
            );
        }
    }
}

#[test]
fn large_transfers_round_trip_through_staging() {
    let Some(gpu) = cuda_or_skip("large_transfers_round_trip_through_staging") else {
        return;
    };
    round_trips::<u32>(&gpu);
    round_trips::<u64>(&gpu);
    round_trips::<i64>(&gpu);
    if staging_on() {
        assert_eq!(gpu.staging_bytes(), STAGING_BUFFERS * STAGING_CHUNK_BYTES);
    }
}

/// One transfer of `n` elements each way from `gpu`, checked.
fn transfer<T: Element>(gpu: &CudaBackend, n: usize, seed: u64) {
    let host = data::<T>(n, seed);
    let buf = gpu.upload(&host).unwrap();
    let what = format!("{} n={n} seed={seed}", T::NAME);
    same(&gpu.download(&buf).unwrap(), &host, &what);
}

#[test]
fn threads_share_the_staging_ring() {
    use rayon::prelude::*;
    let Some(gpu) = cuda_or_skip("threads_share_the_staging_ring") else {
        return;
    };
    let n32 = 2 * chunk::<u32>() + 77;
    let n64 = 2 * chunk::<u64>() + 77;
    // Two threads, one backend: one holds the ring while the other copies directly, or they
    // take turns; both get their own values back.
    std::thread::scope(|s| {
        for t in 0..2u64 {
            let gpu = gpu.clone();
            s.spawn(move || {
                for round in 0..3 {
                    transfer::<u32>(&gpu, n32, 10 * t + round);
                    transfer::<u64>(&gpu, n64, 10 * t + round + 100);
                }
            });
        }
    });
    // Rayon jobs: a job waiting in another's parallel copy may run a job that transfers on the
    // same thread; it must not wait for the ring its own thread holds.
    (0..6u64).into_par_iter().for_each(|t| {
        transfer::<u64>(&gpu, n64, 1000 + t);
        transfer::<u32>(&gpu, n32, 2000 + t);
    });
    if staging_on() {
        assert_eq!(gpu.staging_bytes(), STAGING_BUFFERS * STAGING_CHUNK_BYTES);
    }
}

/// `posted_words` refuses no poster and more words than it has, returns `queue`'s error, and
/// reports work that ends without posting as an error instead of waiting for it forever; the
/// posting itself is what every `read_element` (tested above) goes through.
#[test]
fn posted_words_never_wait_for_work_that_does_not_post() {
    let Some(b) = cuda_or_skip("posted_words_never_wait_for_work_that_does_not_post") else {
        return;
    };
    use joinkit_cuda::{Error, POSTED_WORDS};
    let queued_nothing = |_: &_, _, _| Ok(());
    assert!(matches!(
        b.posted_words(3, 0, queued_nothing),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        b.posted_words(POSTED_WORDS, 1, queued_nothing),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        b.posted_words(3, 1, |_, _, _| Err(Error::InvalidArgument("queue".into()))),
        Err(Error::InvalidArgument(_))
    ));
    // Work is queued (a fill) but never posts: an error once the stream has run it.
    let mut buf = b.alloc::<u64>(1 << 20).unwrap();
    let fill = |_: &_, _, _| b.fill(&mut buf, 7);
    assert!(matches!(b.posted_words(3, 1, fill), Err(Error::Corrupt(_))));
    // Reads after those go on as before.
    let v = b.upload(&[5u64, 6, 7]).unwrap();
    assert_eq!(b.read_element(&v.view(), 2).unwrap(), 7);
}

/// A word that one call posted as data and that the next call takes for its ticket word, holding
/// that call's ticket by chance (a key sample's count of equal pairs, 2, read back as the next
/// ticket gave a join the sample's row count as its output's): the next call still waits for
/// its own post. The first call's words are copied in by the copy engine; the read-back queues
/// behind a fill long enough for the host to poll before the read's kernel runs.
#[test]
fn a_word_posted_as_data_is_not_taken_for_the_next_ticket() {
    let Some(b) = cuda_or_skip("a_word_posted_as_data_is_not_taken_for_the_next_ticket") else {
        return;
    };
    use joinkit_cuda::cudarc::driver::sys;
    let staged = std::sync::Mutex::new(Vec::new());
    b.posted_words(3, 1, |stream, words, ticket| {
        // Data words 1024, the next call's ticket, 9; then this call's ticket.
        let src = vec![1024u64, ticket + 1, 9, ticket];
        // SAFETY: four words into posted_words' room, from a host vector kept until the
        // stream is synchronized below.
        unsafe { sys::cuMemcpyHtoDAsync_v2(words, src.as_ptr().cast(), 32, stream.cu_stream()) }
            .result()
            .map_err(|e| joinkit_cuda::Error::Driver {
                op: "copying posted words",
                message: format!("{e:?}"),
            })?;
        staged.lock().unwrap().push(src);
        Ok(())
    })
    .unwrap();
    b.synchronize().unwrap();
    let mut long = b.alloc::<u64>(1 << 28).unwrap();
    b.fill(&mut long, 3).unwrap();
    let v = b.upload(&[5u64, 6, 7]).unwrap();
    assert_eq!(b.read_element(&v.view(), 2).unwrap(), 7);
    drop(staged);
}
