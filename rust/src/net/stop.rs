//! A stop signal for many tasks that is all but free to check while nothing stopped.
//!
//! The gateway's connections wait for "stop accepting, finish the exchange in flight" and the
//! benchmark client's requests for "stop the run", each in a `select!` beside its work, so the
//! signal is polled every time its task wakes: once per chunk forwarded or token read. tokio's
//! `watch::Receiver::changed`, `Notify` and `tokio_util`'s `CancellationToken` all lock a mutex
//! on each such poll (to store the waker again); a profile of the gateway at 256 streams showed
//! that among its top user-space costs. Here a poll while nothing stopped is one atomic load
//! and a waker comparison; the lock is taken once per waiter (when it first waits, and when it
//! goes) and once by [`Stop::stop`].

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};

/// The signal, shared: [`stop`](Stop::stop) once, [`watch`](Stop::watch) by each waiter.
#[derive(Default)]
pub struct Stop {
    stopped: AtomicBool,
    waiters: Mutex<Waiters>,
}

#[derive(Default)]
struct Waiters {
    next: u64,
    wakers: HashMap<u64, Waker>,
}

impl Stop {
    pub fn new() -> Arc<Stop> {
        Arc::new(Stop::default())
    }

    /// Stops: every waiter wakes and sees it; later waiters see it at once.
    pub fn stop(&self) {
        self.stopped.store(true, Ordering::Release);
        let wakers: Vec<Waker> = {
            let mut waiters = self.waiters.lock().unwrap_or_else(|e| e.into_inner());
            waiters.wakers.drain().map(|(_, waker)| waker).collect()
        };
        for waker in wakers {
            waker.wake();
        }
    }

    pub fn is_stopped(&self) -> bool {
        self.stopped.load(Ordering::Acquire)
    }

    /// A waiter: a future that is ready once stopped (and may be polled again after).
    pub fn watch(self: &Arc<Self>) -> Watch {
        Watch {
            stop: self.clone(),
            id: None,
            waker: None,
        }
    }
}

/// One waiter of a [`Stop`]; a future (`&mut watch` in a `select!`) ready once stopped.
pub struct Watch {
    stop: Arc<Stop>,
    id: Option<u64>,
    /// The waker last stored with the signal (compared, not stored again, on each poll).
    waker: Option<Waker>,
}

impl Watch {
    pub fn is_stopped(&self) -> bool {
        self.stop.is_stopped()
    }

    /// Another waiter of the same signal.
    pub fn watch(&self) -> Watch {
        self.stop.watch()
    }

    fn poll_stopped(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        if self.stop.is_stopped() {
            return Poll::Ready(());
        }
        if matches!(&self.waker, Some(waker) if waker.will_wake(cx.waker())) {
            return Poll::Pending;
        }
        let mut waiters = self.stop.waiters.lock().unwrap_or_else(|e| e.into_inner());
        // (Checked again under the lock: `stop` sets the flag before it takes the wakers.)
        if self.stop.is_stopped() {
            return Poll::Ready(());
        }
        let id = match self.id {
            Some(id) => id,
            None => {
                waiters.next += 1;
                self.id = Some(waiters.next);
                waiters.next
            }
        };
        waiters.wakers.insert(id, cx.waker().clone());
        self.waker = Some(cx.waker().clone());
        Poll::Pending
    }
}

impl Future for Watch {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        self.get_mut().poll_stopped(cx)
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        if let Some(id) = self.id {
            let mut waiters = self.stop.waiters.lock().unwrap_or_else(|e| e.into_inner());
            waiters.wakers.remove(&id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn every_waiter_wakes_on_stop_and_a_late_one_sees_it_at_once() {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let stop = Stop::new();
        let waiting: Vec<_> = (0..100)
            .map(|_| {
                let mut watch = stop.watch();
                runtime.spawn(async move {
                    // Polled many times before the stop, as beside a busy stream.
                    for _ in 0..10 {
                        tokio::select! {
                            _ = &mut watch => return true,
                            _ = tokio::time::sleep(Duration::from_millis(1)) => {}
                        }
                    }
                    (&mut watch).await;
                    watch.is_stopped()
                })
            })
            .collect();
        runtime.block_on(async {
            tokio::time::sleep(Duration::from_millis(30)).await;
            assert_eq!(stop.waiters.lock().unwrap().wakers.len(), 100);
            stop.stop();
            for task in waiting {
                assert!(tokio::time::timeout(Duration::from_secs(5), task)
                    .await
                    .expect("woken")
                    .unwrap());
            }
            stop.watch().await;
        });
        assert!(stop.waiters.lock().unwrap().wakers.is_empty());
    }

    #[test]
    fn a_waiter_that_goes_leaves_nothing_behind() {
        let runtime = tokio::runtime::Runtime::new().unwrap();
        let stop = Stop::new();
        runtime.block_on(async {
            for _ in 0..10 {
                let mut watch = stop.watch();
                tokio::select! {
                    _ = &mut watch => panic!("not stopped"),
                    _ = tokio::time::sleep(Duration::from_millis(1)) => {}
                }
            }
        });
        assert!(stop.waiters.lock().unwrap().wakers.is_empty());
        assert!(!stop.is_stopped());
    }
}
