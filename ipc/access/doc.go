// Package access holds the authorization primitives of localbus: scopes,
// hashed keys, the parsing of credentials out of a request, and Unix socket
// peer credentials. It makes no decisions about routes and writes no
// responses; the router in package ipc asks it questions and answers 401 or
// 403 itself, and the CLI's keys commands edit a [Keyring].
//
// # Where to start
//
// [ParseScope] and [Scopes] say what a caller may do. [Load] reads the keys
// file into a [Keyring] (a regular file owned by the daemon or root, mode
// 0600, opened without following links or blocking); [Keyring.Lookup] turns
// a presented key into its [KeyInfo]. [BearerToken], [SubprotocolKey] and
// [QueryCredential] read credentials from a request; [PeerCred] and
// [PeerScopes] give a Unix socket peer its scopes. A [TicketStore] issues
// and redeems the single-use tickets a browser's EventSource carries in
// ?ticket= ([SplitTicket] takes it out of the query).
//
// # Scopes and routes
//
// admin includes every scope; read includes every read:{family}; publish
// includes every publish:{family}. The routes of SPEC §6 map to checks as
// follows:
//
//	global bus, sessions create/delete, reload, metrics   CanAdmin()
//	session streams, session list and show                 CanRead("")
//	family stream of F                                     CanReadFamily(F)
//	publish a batch                                        CanPublish(f) for every family f in it
//
// A read:{family} key therefore cannot open session streams, and a
// publish:{family} key can publish that family only, to any session.
//
// # Deciding a request
//
// The router, once per request and before any upgrade or response byte:
//
//  1. QueryCredential(r.URL.RawQuery): found means 401, logging the name only.
//  2. BearerToken(r.Header): an error means 401. Without a bearer token, and
//     only on a …/ws route if IsWebSocketUpgrade(r), SubprotocolKey(r.Header).
//  3. A presented key is looked up with [Keyring.Lookup]; unknown is 401.
//  4. On the Unix socket with unix_auth = "peer", the caller's scopes are
//     PeerScopes(peer, daemonUID, unixPeerScopes), joined with the key's by
//     [Scopes.Union]. On TCP, or with unix_auth = "key", they are the key's.
//  5. A missing scope is 403; no credentials where one was needed is 401.
//
// # Keys
//
// A key is [KeyPrefix] and 32 random bytes in base64url ([Generate]). The
// keys file stores only "sha256:<hex>" digests ([HashKey]), with each key's
// name, scopes and creation time; it must have mode 0600 ([Load] refuses a
// wider one) and is replaced atomically ([Keyring.Save]). Lookup compares in
// constant time against every record.
//
// # Secrets in errors and logs
//
// No error or result of this package contains a key, a token or any part of
// an Authorization header or a credential-looking query value. Key names
// and scope strings are not secret and appear in errors.
//
// # Invariants
//
//   - A [Scopes] value only ever holds valid scopes and never changes.
//   - A [Keyring] has unique names and unique digests; it never holds a key.
//   - Every check fails closed: an invalid family, an empty key or a
//     malformed header grants nothing.
package access
