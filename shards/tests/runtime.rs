//! The runtime on real executors: cross-core delivery, bounded queues,
//! coordinated start and shutdown, and fail-stop on a core panic.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use shards::{CorePlacement, Runtime, RuntimeConfig, SendError, ShutdownHandle};

fn two_cores() -> RuntimeConfig {
    let mut config = RuntimeConfig::new(CorePlacement::Unpinned(2));
    config.recv_buffers = 64;
    config.mesh_queue_max = 4;
    config.shutdown_deadline = Duration::from_secs(2);
    config
}

#[test]
fn frames_cross_between_two_real_executors() {
    let shutdown = ShutdownHandle::new();
    let received = Arc::new(AtomicUsize::new(0));
    let seen = received.clone();
    let runtime =
        Runtime::start::<Vec<u8>, _, _>(&two_cores(), shutdown.clone(), move |mut core| {
            let seen = seen.clone();
            async move {
                let inbox = core.take_inbox().expect("inbox taken once");
                core.ready();
                if core.id() == 0 {
                    for n in 0..3u8 {
                        core.mesh().try_send(1, vec![n; 8]).expect("queue has room");
                    }
                    // Sending to oneself is refused: local work needs no channel.
                    assert!(matches!(
                        core.mesh().try_send(0, vec![]),
                        Err(SendError::ToSelf(_))
                    ));
                    assert!(matches!(
                        core.mesh().try_send(9, vec![]),
                        Err(SendError::NoSuchCore(_))
                    ));
                } else {
                    for n in 0..3u8 {
                        let frame = inbox.recv_from(0).await.expect("core 0 is alive");
                        assert_eq!(frame, vec![n; 8]);
                        seen.fetch_add(1, Ordering::SeqCst);
                    }
                }
                core.shutdown().wait().await;
            }
        })
        .expect("runtime starts");
    runtime
        .wait_ready(Duration::from_secs(10))
        .expect("both cores ready");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while received.load(Ordering::SeqCst) < 3 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(received.load(Ordering::SeqCst), 3);
    assert_eq!(
        runtime.mesh_stats()[0].sent_total.load(Ordering::Relaxed),
        3
    );
    shutdown.trigger();
    runtime.join().expect("clean shutdown");
}

#[test]
fn a_full_queue_is_refused_and_counted_not_waited_on() {
    let shutdown = ShutdownHandle::new();
    let outcome = Arc::new(std::sync::Mutex::new(Vec::new()));
    let record = outcome.clone();
    let runtime = Runtime::start::<u32, _, _>(&two_cores(), shutdown.clone(), move |mut core| {
        let record = record.clone();
        async move {
            // Core 1 never reads, so core 0 fills its channel.
            let _inbox = core.take_inbox();
            core.ready();
            if core.id() == 0 {
                let mut results = Vec::new();
                for n in 0..6 {
                    results.push(match core.mesh().try_send(1, n) {
                        Ok(()) => "ok",
                        Err(SendError::Full(m)) => {
                            assert_eq!(m, n, "the refused message comes back");
                            "full"
                        }
                        Err(_) => "other",
                    });
                }
                *record.lock().unwrap() = results;
            }
            core.shutdown().wait().await;
        }
    })
    .expect("runtime starts");
    runtime.wait_ready(Duration::from_secs(10)).expect("ready");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while outcome.lock().unwrap().is_empty() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    let results = outcome.lock().unwrap().clone();
    assert_eq!(results, ["ok", "ok", "ok", "ok", "full", "full"]);
    let stats = &runtime.mesh_stats()[0];
    assert_eq!(stats.sent_total.load(Ordering::Relaxed), 4);
    assert_eq!(stats.full_total.load(Ordering::Relaxed), 2);
    shutdown.trigger();
    runtime.join().expect("clean shutdown");
}

#[test]
fn shutdown_reaches_every_core_and_each_drains() {
    let shutdown = ShutdownHandle::new();
    let drained = Arc::new(AtomicUsize::new(0));
    let count = drained.clone();
    let runtime = Runtime::start::<u32, _, _>(&two_cores(), shutdown.clone(), move |core| {
        let count = count.clone();
        async move {
            core.ready();
            // Work that is in progress when the signal comes.
            let pending = Rc::new(RefCell::new(3));
            core.shutdown().wait().await;
            while *pending.borrow() > 0 {
                shards::sleep(Duration::from_millis(1)).await;
                *pending.borrow_mut() -= 1;
            }
            count.fetch_add(1, Ordering::SeqCst);
        }
    })
    .expect("runtime starts");
    runtime.wait_ready(Duration::from_secs(10)).expect("ready");
    shutdown.trigger();
    let started = std::time::Instant::now();
    runtime.join().expect("clean shutdown");
    assert_eq!(drained.load(Ordering::SeqCst), 2, "both cores drained");
    assert!(started.elapsed() < Duration::from_secs(2));
}

#[test]
fn a_core_stuck_past_the_deadline_is_abandoned() {
    let shutdown = ShutdownHandle::new();
    let mut config = two_cores();
    config.shutdown_deadline = Duration::from_millis(100);
    let runtime = Runtime::start::<u32, _, _>(&config, shutdown.clone(), move |core| async move {
        core.ready();
        // Never returns: ignores shutdown.
        futures_lite::future::pending::<()>().await;
    })
    .expect("runtime starts");
    runtime.wait_ready(Duration::from_secs(10)).expect("ready");
    shutdown.trigger();
    let started = std::time::Instant::now();
    runtime.join().expect("the runtime still stops");
    assert!(started.elapsed() < Duration::from_secs(2));
}

#[test]
fn a_core_that_stops_before_ready_is_reported() {
    let shutdown = ShutdownHandle::new();
    let runtime =
        Runtime::start::<u32, _, _>(&two_cores(), shutdown.clone(), move |core| async move {
            if core.id() == 1 {
                return; // e.g. its listener failed to bind
            }
            core.ready();
            core.shutdown().wait().await;
        })
        .expect("runtime starts");
    let error = runtime.wait_ready(Duration::from_secs(10)).unwrap_err();
    assert!(
        matches!(error, shards::RuntimeError::ExitedBeforeReady { core: 1 }),
        "{error}"
    );
    shutdown.trigger();
    runtime.join().expect("stops");
}

const PANIC_CHILD: &str = "SHARDS_TEST_PANIC_CHILD";

#[test]
fn a_core_panic_takes_the_process_down() {
    if std::env::var_os(PANIC_CHILD).is_some() {
        let shutdown = ShutdownHandle::new();
        let runtime = Runtime::start::<u32, _, _>(&two_cores(), shutdown, move |core| async move {
            core.ready();
            if core.id() == 1 {
                panic!("injected core failure");
            }
            futures_lite::future::pending::<()>().await;
        })
        .expect("runtime starts");
        let _ = runtime.join();
        unreachable!("the panic hook stops the process");
    }
    let output = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "a_core_panic_takes_the_process_down",
            "--nocapture",
        ])
        .env(PANIC_CHILD, "1")
        .output()
        .expect("child runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        !output.status.success(),
        "the process must not survive a core panic"
    );
    assert!(stderr.contains("injected core failure"), "{stderr}");
    assert!(
        stderr.contains("panicked; stopping the process"),
        "{stderr}"
    );
}

/// Every channel of the mesh is allocated when the runtime starts: a
/// queue bound whose channels would not fit in memory is refused then,
/// before any is made (crossbeam would abort or panic on it).
#[test]
fn a_mesh_too_large_for_memory_is_refused_before_it_is_made() {
    let mut config = two_cores();
    config.mesh_queue_max = usize::MAX / 2;
    let started = Runtime::start::<u32, _, _>(&config, ShutdownHandle::new(), |core| async move {
        core.ready();
    });
    let error = match started {
        Ok(_) => panic!("a mesh of 2^63 slots a channel must be refused"),
        Err(error) => error,
    };
    assert!(
        matches!(error, shards::RuntimeError::MeshTooLarge { cores: 2, .. }),
        "{error}"
    );
    assert!(error.to_string().contains("mesh_queue_max"), "{error}");
    // What the channels of a node's default take: 4096 slots of a
    // 32-byte message between 64 cores.
    assert_eq!(
        shards::mesh_bytes::<[u64; 4]>(64, 4096),
        64 * 63 * 4096 * 40
    );
    assert_eq!(shards::mesh_bytes::<[u64; 4]>(1, 1 << 40), 0);
}
