// The actor's defaults (an ActorConfig without `server`), defined once for
// the actor binary and for `kernelrl eval`, which runs the same rollouts in
// its own process and changes only what evaluation does differently.
#ifndef KERNELRL_ACTOR_DEFAULTS_H_
#define KERNELRL_ACTOR_DEFAULTS_H_

#include "proto/actor_config.pb.h"

namespace kernelrl::actor {

// Text format, so a main can put its own blocks (server) beside it.
extern const char kActorDefaultsText[];

// kActorDefaultsText parsed.
v1::ActorConfig ActorDefaults();

}  // namespace kernelrl::actor

#endif  // KERNELRL_ACTOR_DEFAULTS_H_
