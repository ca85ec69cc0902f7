//! The watchdog pings systemd only while the main loop makes progress and no worker is stuck,
//! on a real datagram NOTIFY_SOCKET. Alone in its binary: it sets NOTIFY_SOCKET for the process.

use std::os::unix::net::UnixDatagram;
use std::time::{Duration, Instant};

use inplaced::health::Health;
use inplaced::health::Heartbeat;
use inplaced::systemd::{Notifier, run_watchdog};

fn pings_during(socket: &UnixDatagram, window: Duration) -> usize {
    let deadline = Instant::now() + window;
    let mut count = 0;
    while Instant::now() < deadline {
        let mut buf = [0u8; 256];
        if let Ok(n) = socket.recv(&mut buf) {
            count += String::from_utf8_lossy(&buf[..n])
                .lines()
                .filter(|l| *l == "WATCHDOG=1")
                .count();
        }
    }
    count
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watchdog_pings_stop_while_the_loop_is_stuck_and_resume_after() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("notify.sock");
    let socket = UnixDatagram::bind(&path).unwrap();
    socket
        .set_read_timeout(Some(Duration::from_millis(20)))
        .unwrap();
    // SAFETY: the only test in this binary, and no other thread reads the environment yet.
    unsafe { std::env::set_var("NOTIFY_SOCKET", &path) };

    let heartbeat = Heartbeat::default();
    let health = Health::new(heartbeat.clone()).with_stuck_worker_after(Duration::from_millis(300));
    let interval = Duration::from_millis(200); // pings every 100 ms while healthy
    let watchdog = tokio::spawn(run_watchdog(
        Notifier::start(),
        heartbeat.clone(),
        health.clone(),
        interval,
    ));
    let beating = |heartbeat: Heartbeat| {
        tokio::spawn(async move {
            loop {
                heartbeat.beat();
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
    };

    let loop_task = beating(heartbeat.clone());
    let healthy = tokio::task::block_in_place(|| pings_during(&socket, Duration::from_secs(1)));
    assert!(healthy >= 5, "pings while the loop beats: {healthy}");

    loop_task.abort();
    // One ping may already be on its way for the last beat.
    let stuck = tokio::task::block_in_place(|| pings_during(&socket, Duration::from_secs(1)));
    assert!(stuck <= 1, "pings while the loop is stuck: {stuck}");

    let loop_task = beating(heartbeat.clone());
    let recovered = tokio::task::block_in_place(|| pings_during(&socket, Duration::from_secs(1)));
    assert!(recovered >= 5, "pings after the loop recovers: {recovered}");

    // The main loop beats, but a worker (a request loop) stops making progress: once it has
    // gone 300 ms without, the pings stop; when it ends, they resume.
    let worker = health.worker("recreate", Duration::ZERO);
    let stuck_worker =
        tokio::task::block_in_place(|| pings_during(&socket, Duration::from_millis(1200)));
    assert!(
        stuck_worker <= 4,
        "pings while a worker is stuck (at most the first 300 ms): {stuck_worker}"
    );
    assert!(health.alive().is_err());
    drop(worker);
    let after = tokio::task::block_in_place(|| pings_during(&socket, Duration::from_secs(1)));
    assert!(after >= 5, "pings after the stuck worker ended: {after}");
    loop_task.abort();
    watchdog.abort();
}
