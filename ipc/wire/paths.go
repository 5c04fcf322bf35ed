package wire

import "net/url"

// Paths of the routes that take no path parameter.
const (
	// PathEvents is the global bus's SSE stream.
	PathEvents = "/api/v1/events"
	// PathEventsWS is the global bus's WebSocket stream.
	PathEventsWS = "/api/v1/events/ws"
	// PathSessions lists sessions (GET) and creates one (POST).
	PathSessions = "/api/v1/sessions"
	// PathTickets issues a browser's single-use ticket for one stream
	// (POST TicketRequest, reply TicketReply).
	PathTickets = "/api/v1/tickets"
	// PathReload makes the daemon re-read its configuration (POST).
	PathReload = "/api/v1/reload"
	// PathUpstream answers UpstreamStatus, the NATS bridge's state (GET).
	PathUpstream = "/api/v1/upstream"
	// PathCaps answers Caps; it needs no credentials.
	PathCaps = "/api/v1/caps"
	// PathHealthz answers 200 while the daemon runs.
	PathHealthz = "/healthz"
	// PathReadyz answers 200 once the daemon serves, 503 while it is not
	// ready or shutting down.
	PathReadyz = "/readyz"
	// PathMetrics is the Prometheus exposition.
	PathMetrics = "/metrics"
)

// Patterns of the routes that take a path parameter, as net/http's
// ServeMux spells them: {id} is a session id, {family} a family.
const (
	PatternSession       = PathSessions + "/{id}"
	PatternSessionEvents = PatternSession + "/events"
	PatternSessionWS     = PatternSession + "/ws"
	PatternFamilyEvents  = pathFamilies + "{family}/events"
	PatternFamilyWS      = pathFamilies + "{family}/ws"
	// PatternSessionConsumers lists a session's consumers (GET);
	// PatternConsumer forgets one (DELETE); PatternConsumerAck
	// acknowledges for one (POST AckRequest, reply AckReply). {name} is
	// a consumer's name.
	PatternSessionConsumers = PatternSession + "/consumers"
	PatternConsumer         = PatternSessionConsumers + "/{name}"
	PatternConsumerAck      = PatternConsumer + "/ack"
)

// pathFamilies begins the paths of the family streams.
const pathFamilies = "/api/v1/families/"

// SessionPath is the path of the session id: GET describes it, DELETE
// deletes it.
func SessionPath(id string) string { return PathSessions + "/" + url.PathEscape(id) }

// SessionEventsPath is the path of the session id's events: GET streams
// them as SSE, POST publishes.
func SessionEventsPath(id string) string { return SessionPath(id) + "/events" }

// SessionWSPath is the path of the session id's WebSocket stream.
func SessionWSPath(id string) string { return SessionPath(id) + "/ws" }

// SessionConsumersPath is the path of the session id's consumers: GET lists
// them.
func SessionConsumersPath(id string) string { return SessionPath(id) + "/consumers" }

// ConsumerPath is the path of the session id's consumer name: DELETE
// forgets it.
func ConsumerPath(id, name string) string {
	return SessionConsumersPath(id) + "/" + url.PathEscape(name)
}

// ConsumerAckPath is the path that acknowledges events for the session
// id's consumer name (POST AckRequest).
func ConsumerAckPath(id, name string) string { return ConsumerPath(id, name) + "/ack" }

// FamilyEventsPath is the path of the SSE stream of one family's events
// across every session.
func FamilyEventsPath(family string) string {
	return pathFamilies + url.PathEscape(family) + "/events"
}

// FamilyWSPath is the path of the WebSocket stream of one family's events
// across every session.
func FamilyWSPath(family string) string {
	return pathFamilies + url.PathEscape(family) + "/ws"
}
