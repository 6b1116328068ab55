use std::net::SocketAddr;
use std::time::Duration;

use fullerene_proto::time::Time;

use super::*;

fn addr(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

fn ms(millis: u64) -> Duration {
    Duration::from_millis(millis)
}

/// `millis` milliseconds on the follower's clock.
fn t(millis: u64) -> Time {
    Time::from_millis(millis)
}

/// Whether `delay` is within `[low, high]` milliseconds.
fn within(delay: Duration, low: u64, high: u64) -> bool {
    (ms(low)..=ms(high)).contains(&delay)
}

fn backoff(redirects_at_once: u32, pass_over: Duration, seed: u64) -> Follower {
    let config = FollowConfig {
        pacing: Pacing::Backoff {
            initial: ms(100),
            max: ms(1_000),
        },
        redirects_at_once,
        pass_over,
        seed,
    };
    Follower::new(vec![addr(1), addr(2), addr(3)], config).unwrap()
}

fn rounds(masters: &[u16], pause: Duration, pass_over: Duration) -> Follower {
    let config = FollowConfig {
        pacing: Pacing::Rounds { pause },
        redirects_at_once: u32::MAX,
        pass_over,
        seed: 0,
    };
    Follower::new(masters.iter().map(|&p| addr(p)).collect(), config).unwrap()
}

fn at(port: u16, delay_ms: u64) -> Attempt {
    Attempt {
        addr: addr(port),
        delay: ms(delay_ms),
    }
}

#[test]
fn an_empty_list_is_refused() {
    let config = FollowConfig {
        pacing: Pacing::Rounds { pause: ms(1) },
        redirects_at_once: 1,
        pass_over: Duration::ZERO,
        seed: 0,
    };
    assert_eq!(Follower::new(vec![], config).err(), Some(NoMasters));
}

#[test]
fn masters_are_tried_in_turn_from_the_top_with_a_growing_capped_jittered_backoff() {
    let mut f = backoff(3, Duration::ZERO, 9);
    assert_eq!(f.start(t(0)), at(1, 0));
    let attempts: Vec<Attempt> = (0..8).map(|_| f.failed(t(0))).collect();
    let order: Vec<SocketAddr> = attempts.iter().map(|a| a.addr).collect();
    assert_eq!(&order[..4], &[addr(2), addr(3), addr(1), addr(2)]);
    // Nominal 100, 200, 400, 800, then capped at 1000; each in [nominal / 2, nominal].
    let nominal = [100, 200, 400, 800, 1_000, 1_000, 1_000, 1_000];
    for (attempt, n) in attempts.iter().zip(nominal) {
        let d = attempt.delay;
        assert!(
            within(d, n / 2, n),
            "delay {d:?} outside [{}, {n}] ms",
            n / 2
        );
    }
    assert_eq!(f.failures(), 8);
    // The same seed gives the same delays; another seed others.
    let delays = |seed| {
        let mut f = backoff(3, Duration::ZERO, seed);
        f.start(t(0));
        (0..8)
            .map(|_| f.failed(t(0)).delay)
            .collect::<Vec<Duration>>()
    };
    assert_eq!(delays(9), delays(9));
    assert_ne!(delays(9), delays(10));
}

#[test]
fn joining_resets_the_backoff_and_a_lost_session_starts_it_over() {
    let mut f = backoff(3, Duration::ZERO, 1);
    f.start(t(0));
    f.failed(t(0));
    f.failed(t(0));
    f.joined();
    assert_eq!(f.failures(), 0);
    let next = f.failed(t(0));
    assert!(within(next.delay, 50, 100), "{next:?}");
    // However many attempts failed before, a lost session backs off from the start, to the
    // next master of the round.
    f.failed(t(0));
    f.failed(t(0));
    let current = f.current().unwrap();
    let after_loss = f.lost(t(0));
    assert_ne!(after_loss.addr, current);
    assert!(within(after_loss.delay, 50, 100), "{after_loss:?}");
}

#[test]
fn redirects_are_followed_at_once_and_the_leader_is_learned() {
    let mut f = backoff(3, Duration::ZERO, 1);
    f.start(t(0));
    assert_eq!(f.redirected(Some(addr(9)), t(0)), at(9, 0));
    assert_eq!(f.current(), Some(addr(9)));
    assert_eq!(f.masters(), &[addr(1), addr(2), addr(3), addr(9)]);
    // No leader known: the next master of the round, after a backoff.
    let next = f.redirected(None, t(0));
    assert_eq!(next.addr, addr(2));
    assert!(within(next.delay, 50, 100), "{next:?}");
}

#[test]
fn redirects_in_circles_end_in_a_backoff_to_the_next_master() {
    let mut f = backoff(3, Duration::ZERO, 1);
    f.start(t(0));
    assert_eq!(f.redirected(Some(addr(2)), t(0)), at(2, 0));
    assert_eq!(f.redirected(Some(addr(3)), t(0)), at(3, 0));
    assert_eq!(f.redirected(Some(addr(2)), t(0)), at(2, 0));
    // The fourth in a row is not followed: the next master of the round, after a backoff.
    let next = f.redirected(Some(addr(3)), t(0));
    assert_eq!(next.addr, addr(2));
    assert!(next.delay >= ms(50), "{next:?}");
    // And the count starts over.
    assert_eq!(f.redirected(Some(addr(3)), t(0)), at(3, 0));
    // A join starts it over too.
    f.joined();
    for port in [1, 2, 1] {
        assert_eq!(f.redirected(Some(addr(port)), t(0)), at(port, 0));
    }
}

#[test]
fn a_redirect_to_the_master_itself_is_not_followed() {
    let mut f = backoff(3, Duration::ZERO, 1);
    f.start(t(0));
    let next = f.redirected(Some(addr(1)), t(0));
    assert_eq!(next.addr, addr(2));
    assert!(next.delay > Duration::ZERO);
}

#[test]
fn failed_masters_are_passed_over_for_a_while() {
    let mut f = rounds(&[1, 2, 3], ms(100), ms(1_000));
    assert_eq!(f.start(t(0)), at(1, 0));
    // 1 fails; 2 redirects to 1, which is passed over: not followed.
    assert_eq!(f.failed(t(10)), at(2, 0));
    let next = f.redirected(Some(addr(1)), t(20));
    assert_eq!(next.addr, addr(3));
    // 3 fails too; the next round skips 1 and 3 while they are passed over.
    assert_eq!(f.failed(t(30)), at(2, 0));
    assert!(f.is_passed_over(addr(1), t(1_009)));
    assert!(!f.is_passed_over(addr(1), t(1_010)));
    // Once the time is over, a redirect to 1 is followed.
    assert_eq!(f.redirected(Some(addr(1)), t(1_010)), at(1, 0));
    // A master that answers is no longer passed over.
    f.pass_over(addr(1), t(1_010), ms(60_000));
    f.joined();
    assert!(!f.is_passed_over(addr(1), t(1_011)));
}

#[test]
fn when_every_master_is_passed_over_the_round_goes_on_in_order() {
    let mut f = rounds(&[1, 2], ms(100), ms(1_000));
    assert_eq!(f.start(t(0)), at(1, 0));
    assert_eq!(f.failed(t(0)), at(2, 100));
    assert_eq!(f.failed(t(0)), at(1, 0));
    assert_eq!(f.failed(t(0)), at(2, 100));
}

#[test]
fn rounds_pause_between_rounds_and_after_answers_that_there_is_no_leader() {
    let mut f = rounds(&[1, 2, 3], ms(100), Duration::ZERO);
    assert_eq!(f.start(t(0)), at(1, 0));
    assert_eq!(f.failed(t(0)), at(2, 0));
    // The last master of the round: the round's pause comes first.
    assert_eq!(f.failed(t(0)), at(3, 100));
    assert_eq!(f.failed(t(0)), at(1, 0));
    // No leader known: pause, then the next master.
    assert_eq!(f.redirected(None, t(0)), at(2, 100));
    // Unavailable: the same master again after the pause.
    assert_eq!(f.wait(), at(2, 100));
    // A new request starts from the top.
    f.rewind();
    assert_eq!(f.failed(t(0)), at(1, 0));
    // With one master, every attempt starts a round.
    let mut single = rounds(&[1], ms(100), Duration::ZERO);
    assert_eq!(single.start(t(0)), at(1, 100));
    assert_eq!(single.failed(t(0)), at(1, 100));
}

#[test]
fn backoff_waits_for_an_unavailable_master_with_a_backoff() {
    let mut f = backoff(3, Duration::ZERO, 1);
    f.start(t(0));
    let again = f.wait();
    assert_eq!(again.addr, addr(1));
    assert!(within(again.delay, 50, 100), "{again:?}");
    assert_eq!(f.failures(), 1);
}

#[test]
fn a_pacing_change_keeps_the_round() {
    let mut f = rounds(&[1, 2, 3], ms(100), ms(1_000));
    f.start(t(0));
    f.set_pacing(Pacing::Rounds { pause: ms(5) });
    assert_eq!(f.redirected(None, t(0)), at(2, 5));
}
