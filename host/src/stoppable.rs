//! A background thread that runs until told to stop, and is told and joined when dropped: the
//! admin server, the epoch ticker, the plugin file watch and the repartition step each kept their
//! own copy of "stop flag + thread + join on drop", and only one of them said when its thread had
//! panicked.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

pub struct StoppableThread {
    name: &'static str,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl StoppableThread {
    /// Runs `body` on a thread named `name`; `body` returns once the flag it is given is set.
    pub fn spawn(
        name: &'static str,
        body: impl FnOnce(&AtomicBool) + Send + 'static,
    ) -> std::io::Result<StoppableThread> {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || body(&flag))?;
        Ok(StoppableThread::adopt(name, stop, thread))
    }

    /// A thread started elsewhere that watches `stop` (the admin server starts its own).
    pub fn adopt(name: &'static str, stop: Arc<AtomicBool>, thread: JoinHandle<()>) -> Self {
        StoppableThread {
            name,
            stop,
            thread: Some(thread),
        }
    }

    /// Why the thread ended, when it ended without being told to (it returned, or panicked);
    /// `None` while it runs, once it has been asked to stop, and after the first answer.
    pub fn ended_unasked(&mut self) -> Option<String> {
        let running = self.thread.as_ref()?;
        if !running.is_finished() || self.stop.load(Ordering::SeqCst) {
            return None;
        }
        let thread = self.thread.take()?;
        Some(match thread.join() {
            Ok(()) => "its thread returned".to_owned(),
            Err(panic) => format!("its thread panicked: {}", panic_message(&*panic)),
        })
    }
}

/// Sets the flag and waits for the thread; a panic it died of is logged with its name, never
/// swallowed.
impl Drop for StoppableThread {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(thread) = self.thread.take() {
            if let Err(panic) = thread.join() {
                tracing::error!(
                    "the {} thread panicked: {}",
                    self.name,
                    panic_message(&*panic)
                );
            }
        }
    }
}

/// What a panic said.
fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    match (panic.downcast_ref::<&str>(), panic.downcast_ref::<String>()) {
        (Some(s), _) => (*s).to_owned(),
        (_, Some(s)) => s.clone(),
        _ => "(no message)".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    fn wait_finished(t: &StoppableThread) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !t.thread.as_ref().is_some_and(|t| t.is_finished()) {
            assert!(Instant::now() < deadline, "the thread did not end");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    #[test]
    fn dropping_stops_and_joins_the_thread() {
        let ran = Arc::new(AtomicBool::new(false));
        let seen = ran.clone();
        let mut t = StoppableThread::spawn("test-loop", move |stop| {
            while !stop.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(1));
            }
            seen.store(true, Ordering::SeqCst);
        })
        .unwrap();
        assert_eq!(t.ended_unasked(), None, "still running");
        drop(t);
        assert!(ran.load(Ordering::SeqCst), "joined after its loop ended");
    }

    #[test]
    fn a_thread_that_panics_or_returns_unasked_says_so_once() {
        let mut t = StoppableThread::spawn("test-panic", |_| panic!("boom")).unwrap();
        wait_finished(&t);
        assert_eq!(
            t.ended_unasked().as_deref(),
            Some("its thread panicked: boom")
        );
        assert_eq!(t.ended_unasked(), None);
        let mut t = StoppableThread::spawn("test-return", |_| {}).unwrap();
        wait_finished(&t);
        assert_eq!(t.ended_unasked().as_deref(), Some("its thread returned"));
    }
}
