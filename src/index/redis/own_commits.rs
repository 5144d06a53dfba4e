//! This process' own recent commits, so that a check can vouch for them to
//! `commit.lua` instead of having the script read them back.
//!
//! Why: a worker keeps many checks in flight (16 by default). Each decides
//! from what it read (a gather, or the replica's copy), which cannot yet show
//! what the checks ahead of it are committing, so the commit script had to
//! read those articles back from Redis and test them (~12 per check at 1 M,
//! about 40 % of a replica-mode commit). But they are this process' own
//! articles: it knows them. So a check tests them here, with the script's own
//! test (a shared 16-bit block, the content hash's `c:` field, a lookup sketch
//! hash, or the same id), and when none of them can change its decision it
//! tells the script so.
//!
//! How the script knows which handles those are, without reading them: each
//! bucket's counter hash (`n:`) holds a marker of its newest run of handles
//! written by one process, `w` (that process' token), `w0` (the run's first
//! handle), `ws` (the highest sequence number among the run's commits) and
//! `wn` (the run's newest handle). The script skips handles `w0..=n` of a
//! check that vouches only when `w` is the check's token, `wn` is `n` (no
//! writer that keeps no marker came after) and `ws` is below the check's own
//! sequence number: every
//! commit in the run was then sent before this one, and those are exactly the
//! commits this module tested, from the check's *horizon* on:
//!
//! - A commit older than the horizon had been answered before the check's
//!   gather was sent (so it ran before the gather's reads), or, in replica
//!   mode, before the check decided, and was filed in the copy: its handle is
//!   at most the counter the check gives the script. Or it stored nothing.
//! - A commit sent after the check is in the run only if it ran first, which
//!   `ws` shows: the script then reads the run as before.
//!
//! A commit whose answer never came (an error, a dropped future) may or may
//! not have run: the process takes a new token, and the old one's runs are
//! never skipped again.

use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasher, Hasher};

use crate::fingerprint::Fingerprint;

/// Commits remembered. A check whose horizon has fallen out of this many
/// (decided, then stalled while this many commits were sent) does not vouch.
const REMEMBERED: usize = 1024;

/// What a commit is tested on, and tested with: the tokens commit.lua tests.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Tokens {
    pub(crate) id: String,
    /// The SimHash's four 16-bit blocks (matched at any position, as the
    /// script does: small buckets share block sets across positions).
    pub(crate) blocks: [u16; 4],
    /// Low 24 bits of the content hash (what names its `c:` field); `None`
    /// for an empty fingerprint (not indexed, never compared).
    pub(crate) content: Option<u32>,
    /// The whole sketch (sorted); a check looks up its first `lookups`.
    pub(crate) sketch: Vec<u32>,
    pub(crate) lookups: usize,
}

impl Tokens {
    pub(crate) fn of(id: &str, fp: &Fingerprint, lookups: usize) -> Tokens {
        Tokens {
            id: id.to_owned(),
            blocks: crate::simhash::blocks(fp.simhash),
            content: (!fp.is_empty()).then_some((fp.content & 0xff_ffff) as u32),
            sketch: fp.signatures.clone(),
            lookups: lookups.min(fp.signatures.len()),
        }
    }
}

/// How a check read one live bucket, as far as its commit is concerned.
#[derive(Debug, Clone)]
pub(crate) enum Scope {
    /// Searched: every token counts, except hashes whose lists were full
    /// (`full`: '1' per list, the content list then each lookup sketch list).
    Probed { full: String },
    /// Not searched (outside the window): only the id counts.
    IdOnly,
}

/// Where a check decided: the commits it must test are those from `seq` on.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Horizon {
    epoch: u64,
    seq: u64,
}

/// What a check tells commit.lua: this process' token, the commit's sequence
/// number, and whether it vouches for the run of this process' commits.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Ticket {
    pub(crate) token: String,
    pub(crate) seq: u64,
    pub(crate) vouch: bool,
}

#[derive(Debug, Clone)]
struct Sent {
    seq: u64,
    label: String,
    tokens: Tokens,
    state: State,
}

#[derive(Debug, Clone, PartialEq)]
enum State {
    InFlight,
    /// Stored under this handle of its bucket.
    Stored(u64),
    /// Answered without storing anything.
    Done,
}

#[derive(Debug, Clone)]
pub(crate) struct OwnCommits {
    token: String,
    epoch: u64,
    next_seq: u64,
    sent: VecDeque<Sent>,
    /// Every commit before this sequence number is settled for good: answered
    /// without storing, or stored and filed in the copy.
    settled_before: u64,
}

impl Default for OwnCommits {
    fn default() -> Self {
        OwnCommits {
            token: new_token(),
            epoch: 0,
            next_seq: 1,
            sent: VecDeque::new(),
            settled_before: 1,
        }
    }
}

impl OwnCommits {
    /// A check reads now (the default mode: `filed` says `Some(u64::MAX)`,
    /// every answered commit ran before the reads) or decides now from a copy
    /// whose bucket `label` holds handles `1..=filed(label)` (`None`: a
    /// bucket the copy does not hold; call it under the copy's lock, so that
    /// both see one copy).
    pub(crate) fn horizon(&mut self, filed: impl Fn(&str) -> Option<u64>) -> Horizon {
        let settled = |s: &Sent| match s.state {
            State::InFlight => false,
            State::Done => true,
            State::Stored(h) => filed(&s.label).is_some_and(|n| n >= h),
        };
        let front = self.sent.front().map_or(self.next_seq, |s| s.seq);
        let mut at = self.settled_before.max(front);
        while let Some(s) = self.sent.get((at - front) as usize) {
            if !settled(s) {
                break;
            }
            at += 1;
        }
        self.settled_before = at;
        // Past the settled prefix, a commit stored in a bucket the copy does
        // not hold needs no test either: the check names the live buckets it
        // read, and the script sends it back if that bucket is live. (Not
        // settled for good: the copy may learn the bucket short of its handle.)
        let mut seq = at;
        while let Some(s) = self.sent.get((seq - front) as usize) {
            let beyond = matches!(s.state, State::Stored(_)) && filed(&s.label).is_none();
            if !(settled(s) || beyond) {
                break;
            }
            seq += 1;
        }
        Horizon {
            epoch: self.epoch,
            seq,
        }
    }

    /// The check decided at `horizon` sends its commit now: its ticket. It
    /// vouches if none of this process' commits since its horizon can change
    /// what it decided (`scopes`: how it read each live bucket).
    pub(crate) fn send(
        &mut self,
        horizon: Horizon,
        label: &str,
        tokens: Tokens,
        scopes: &HashMap<String, Scope>,
    ) -> Ticket {
        if self.sent.len() >= REMEMBERED {
            if self
                .sent
                .front()
                .is_some_and(|s| s.seq >= self.settled_before)
            {
                // Forgetting a commit not settled yet would let a later
                // horizon pass it untested: start afresh instead (before this
                // commit takes its number, which is then not settled).
                self.forget_all();
            } else {
                self.sent.pop_front();
            }
        }
        let seq = self.next_seq;
        self.next_seq += 1;
        let remembered = self.sent.front().is_none_or(|s| s.seq <= horizon.seq);
        let vouch = horizon.epoch == self.epoch
            && remembered
            && self
                .sent
                .iter()
                .filter(|s| s.seq >= horizon.seq)
                .all(|s| !may_change(&tokens, s, scopes));
        self.sent.push_back(Sent {
            seq,
            label: label.to_owned(),
            tokens,
            state: State::InFlight,
        });
        Ticket {
            token: self.token.clone(),
            seq,
            vouch,
        }
    }

    /// The commit `ticket` was answered: stored under `handle`, or not at all.
    pub(crate) fn answered(&mut self, ticket: &Ticket, handle: Option<u64>) {
        if ticket.token != self.token {
            return;
        }
        let Some(front) = self.sent.front().map(|s| s.seq) else {
            return;
        };
        if let Some(s) = ticket
            .seq
            .checked_sub(front)
            .and_then(|i| self.sent.get_mut(i as usize))
        {
            s.state = handle.map_or(State::Done, State::Stored);
        }
    }

    /// The commit `ticket` got no answer: it may have run or not. Forget
    /// every commit and take a new token, whose runs start afresh.
    pub(crate) fn lost(&mut self, ticket: &Ticket) {
        if ticket.token == self.token {
            self.forget_all();
        }
    }

    /// Forget every commit and take a new token: nothing sent so far is
    /// vouched for again (also when the copy drops what it had filed).
    pub(crate) fn forget_all(&mut self) {
        self.token = new_token();
        self.epoch += 1;
        self.sent.clear();
        self.settled_before = self.next_seq;
    }
}

/// Whether the commit `s` could change what a check with `tokens` decided
/// (the test commit.lua applies to an article it reads back).
fn may_change(tokens: &Tokens, s: &Sent, scopes: &HashMap<String, Scope>) -> bool {
    if s.tokens.id == tokens.id {
        return true;
    }
    let full = match scopes.get(&s.label) {
        // A bucket the check did not see: the script sends it back anyway.
        None => return true,
        Some(Scope::IdOnly) => return false,
        Some(Scope::Probed { full }) => full.as_bytes(),
    };
    let listed = |i: usize| full.get(i) != Some(&b'1');
    let theirs = &s.tokens;
    tokens.blocks.iter().any(|b| theirs.blocks.contains(b))
        || (listed(0) && tokens.content.is_some() && tokens.content == theirs.content)
        || tokens.sketch[..tokens.lookups]
            .iter()
            .enumerate()
            .any(|(i, h)| listed(1 + i) && theirs.sketch.contains(h))
}

/// A token no other process has: 16 hex digits from a randomly keyed hash of
/// the process id and the time.
fn new_token() -> String {
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    format!("{:016x}", h.finish())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tokens(id: &str, blocks: [u16; 4], content: u32, sketch: &[u32]) -> Tokens {
        Tokens {
            id: id.into(),
            blocks,
            content: Some(content),
            sketch: sketch.to_vec(),
            lookups: sketch.len(),
        }
    }

    /// Send a commit decided just now, from a copy holding no handle.
    fn send_now(
        own: &mut OwnCommits,
        label: &str,
        tokens: Tokens,
        scopes: &HashMap<String, Scope>,
    ) -> Ticket {
        let h = own.horizon(|_| Some(0));
        own.send(h, label, tokens, scopes)
    }

    /// Commit x (blocks 1, 2, 3, 4, content 10) sent into bucket b1, which
    /// the next checks probe.
    fn x_in_flight() -> (OwnCommits, HashMap<String, Scope>, Ticket) {
        let mut own = OwnCommits::default();
        let scopes = probed("b1", "0");
        let x = send_now(&mut own, "b1", tokens("x", [1, 2, 3, 4], 10, &[]), &scopes);
        (own, scopes, x)
    }

    fn probed(label: &str, full: &str) -> HashMap<String, Scope> {
        HashMap::from([(label.to_owned(), Scope::Probed { full: full.into() })])
    }

    #[test]
    fn tokens_are_the_scripts() {
        let fp = Fingerprint {
            simhash: 0x1111_2222_3333_4444,
            content: 0xaabb_ccdd_eeff_0102,
            signatures: vec![7, 9, 11],
            words: 3,
            numbers: Vec::new(),
        };
        let t = Tokens::of("a", &fp, 2);
        assert_eq!(t.blocks, [0x1111, 0x2222, 0x3333, 0x4444]);
        assert_eq!(t.content, Some(0xff_0102));
        assert_eq!((t.sketch.as_slice(), t.lookups), (&[7, 9, 11][..], 2));
        let empty = Fingerprint { words: 0, ..fp };
        assert_eq!(Tokens::of("e", &empty, 2).content, None);
    }

    #[test]
    fn vouches_only_when_no_commit_since_the_horizon_shares_a_token() {
        let mut own = OwnCommits::default();
        let scopes = probed("b1", "000");
        let t1 = send_now(
            &mut own,
            "b1",
            tokens("x", [1, 2, 3, 4], 10, &[100]),
            &scopes,
        );
        assert!(t1.vouch, "nothing sent before it");
        // Decided while x is in flight: tested against it.
        let unrelated = send_now(
            &mut own,
            "b1",
            tokens("y", [5, 6, 7, 8], 11, &[101]),
            &scopes,
        );
        assert!(unrelated.vouch);
        for (what, t) in [
            (
                "a block at another position",
                tokens("z", [9, 9, 9, 1], 12, &[102]),
            ),
            ("the content field", tokens("z", [9, 9, 9, 9], 10, &[102])),
            (
                "a lookup sketch hash",
                tokens("z", [9, 9, 9, 9], 12, &[100]),
            ),
            ("the id", tokens("x", [9, 9, 9, 9], 12, &[102])),
        ] {
            let h = own.horizon(|_| Some(0));
            assert!(
                !own.clone().send(h, "b1", t, &scopes).vouch,
                "shares {what}"
            );
        }
        // A full list's hash is no conflict (the script ignores it too); an
        // article outside the window counts by its id only.
        let h = own.horizon(|_| Some(0));
        let t = own.send(
            h,
            "b1",
            tokens("z", [9, 9, 9, 9], 10, &[100]),
            &probed("b1", "11"),
        );
        assert!(t.vouch);
        let h = own.horizon(|_| Some(0));
        let far = HashMap::from([("b1".to_owned(), Scope::IdOnly)]);
        assert!(
            own.send(h, "b1", tokens("w", [1, 2, 3, 4], 10, &[]), &far)
                .vouch
        );
        // A bucket the check did not see: no vouching.
        let h = own.horizon(|_| Some(0));
        assert!(
            !own.send(h, "b1", tokens("v", [0; 4], 0, &[]), &probed("b0", ""))
                .vouch
        );
    }

    #[test]
    fn commits_filed_before_the_decision_need_no_test() {
        let (mut own, scopes, x) = x_in_flight();
        let y = send_now(&mut own, "b1", tokens("y", [5, 6, 7, 8], 11, &[]), &scopes);
        own.answered(&x, Some(1));
        own.answered(&y, None);
        let near_x = tokens("z", [1, 0, 0, 0], 0, &[]);
        // x stored, not filed yet (the copy holds 0 handles): still tested.
        let h = own.horizon(|_| Some(0));
        assert!(!own.clone().send(h, "b1", near_x.clone(), &scopes).vouch);
        // Filed: settled, and the check's counter covers it.
        let h = own.horizon(|_| Some(1));
        assert!(own.send(h, "b1", near_x.clone(), &scopes).vouch);
        assert_eq!(own.settled_before, 3);
    }

    #[test]
    fn a_commit_stored_in_a_bucket_the_copy_lacks_is_not_settled_for_good() {
        let mut own = OwnCommits::default();
        let scopes = probed("b1", "0");
        let h = own.horizon(|_| None);
        let x = own.send(h, "b2", tokens("x", [1, 2, 3, 4], 10, &[]), &scopes);
        own.answered(&x, Some(5));
        // The copy lacks b2: the check needs no test (it did not see b2, so
        // the script sends it back if b2 is live) ...
        let h = own.horizon(|l| (l == "b1").then_some(0));
        assert_eq!(h.seq, 2);
        assert_eq!(own.settled_before, 1);
        // ... but once the copy holds b2 short of handle 5, x counts again.
        let h = own.horizon(|_| Some(4));
        assert_eq!(h.seq, 1);
        let both = HashMap::from([
            ("b1".to_owned(), Scope::Probed { full: "0".into() }),
            ("b2".to_owned(), Scope::Probed { full: "0".into() }),
        ]);
        assert!(
            !own.send(h, "b1", tokens("y", [1, 0, 0, 0], 0, &[]), &both)
                .vouch
        );
    }

    #[test]
    fn a_lost_answer_takes_a_new_token_and_spoils_older_horizons() {
        let (mut own, scopes, x) = x_in_flight();
        let before = own.horizon(|_| Some(0));
        let old = x.token.clone();
        own.lost(&x);
        assert_ne!(own.token, old);
        let t = own.send(before, "b1", tokens("y", [5, 6, 7, 8], 11, &[]), &scopes);
        assert!(!t.vouch, "decided under the old token");
        let h = own.horizon(|_| Some(0));
        assert!(
            own.send(h, "b1", tokens("z", [9, 9, 9, 9], 12, &[]), &scopes)
                .vouch
        );
        // An answer for the old token changes nothing.
        own.answered(&x, Some(1));
        assert!(own.sent.iter().all(|s| s.state == State::InFlight));
    }

    #[test]
    fn a_horizon_older_than_what_is_remembered_does_not_vouch() {
        let mut own = OwnCommits::default();
        let scopes = probed("b1", "0");
        let stalled = own.horizon(|_| Some(0));
        let mut sent = Vec::new();
        for n in 0..REMEMBERED as u16 {
            let t = tokens(&n.to_string(), [n, n, n, n], 0, &[]);
            sent.push(send_now(&mut own, "b1", t, &scopes));
        }
        // All answered and filed: the oldest are dropped as new ones come.
        for (h, t) in sent.iter().enumerate() {
            own.answered(t, Some(h as u64 + 1));
        }
        let h = own.horizon(|_| Some(REMEMBERED as u64));
        let t = own.send(h, "b1", tokens("new", [7, 7, 7, 7], 1, &[]), &scopes);
        assert!(t.vouch);
        assert_eq!(own.sent.len(), REMEMBERED);
        let t = own.send(stalled, "b1", tokens("s", [u16::MAX; 4], 1, &[]), &scopes);
        assert!(!t.vouch, "commits it never tested were dropped");
    }

    #[test]
    fn dropping_a_commit_not_settled_starts_afresh() {
        let mut own = OwnCommits::default();
        let scopes = probed("b1", "0");
        for n in 0..REMEMBERED as u16 {
            let t = tokens(&n.to_string(), [n, n, n, n], 0, &[]);
            send_now(&mut own, "b1", t, &scopes);
        }
        let token = own.token.clone();
        // All still in flight: one more would push out one not settled.
        let h = own.horizon(|_| Some(0));
        let t = own.send(h, "b1", tokens("x", [u16::MAX; 4], 1, &[]), &scopes);
        assert!(!t.vouch);
        assert_ne!(t.token, token, "a new token, whose runs start afresh");
        assert_eq!(own.sent.len(), 1, "only the new commit is remembered");
        let h = own.horizon(|_| Some(0));
        let u = own.send(h, "b1", tokens("y", [u16::MAX; 4], 2, &[]), &scopes);
        assert!(!u.vouch, "tested against x, which it shares a block with");
    }
}
