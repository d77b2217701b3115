package engine

import "errors"

// ErrZombie is returned when another live instance uses our instance id: the
// broker fenced this one. Restarting it would only fence the other in turn,
// so the process must exit.
var ErrZombie = errors.New("fenced by another instance with the same instance_id")
