// Package share is fair shares of the daemon's limited pools (SPEC §2,
// "Fair shares"): a [Pool] is a limit on something peers hold (bytes of
// request bodies being read, outstanding tickets, sessions a publish
// created, subscribers of one bus, remembered idempotency keys, …), and
// each peer draws on it through its own [Account].
//
// # Where to start
//
// A [Peer] names who draws: [Privileged] (root, the daemon's own uid, the
// daemon itself), [UID] (another Unix socket peer, with or without a bearer
// key), [Key] (a key's name on TCP), or [Unknown] (the zero value: a holder
// nobody named, such as a session an older state dir stored without its
// creator). [NewPool] makes a pool; [Pool.Account] returns a peer's account,
// looked up once per request; [Account.Acquire] takes units or refuses with
// a [*Refusal]; [Account.Release] gives them back.
//
// # The rule
//
// A pool has a limit L and a share f (peer_share, 0.25 by default in the
// daemon; 0 or 1 turns shares off). Every peer but a privileged one may
// hold at most max(1, ⌊f·L⌋) units, and is refused once the pool as a
// whole (what every peer, privileged ones included, holds) would pass L.
// Privileged peers share one account that may hold up to L, whatever the
// others hold: they are never refused because of another peer. So a pool
// holds at most 2·L units: L for the privileged account, and what the
// others took before it. One peer's use never refuses another's, unless
// enough peers each hold their share to fill the pool (four, with the
// default share).
//
// # Cost
//
// An account is one atomic counter; the pool keeps one more for its total.
// Acquire and Release are two atomic adds each (and two more to undo a
// refused draw), and never take a lock. Pool.Account takes a lock only the
// first time it meets a peer. Accounts are never forgotten: there are as
// many as the identities the machine can present (its uids, the keys
// file's names), which is small.
//
// # Races accepted
//
// A draw adds first and checks after, undoing itself when refused, so two
// peers drawing at once near a limit may both be refused where one of them
// would have fitted: a refusal is retried, never wrong in the other
// direction. SetLimit stores the limit and the share apart: a draw racing
// it may see one new and one old; units already held stay held when a
// limit goes down, and the pool refuses new draws until they are released.
package share
