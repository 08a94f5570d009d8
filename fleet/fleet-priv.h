/* fleet: what the module's files share (not for other modules).
 *
 * Files: place.c (the placement rule), registry.c (live guests by id),
 * slots.c (boot slots), guest.c (the live guest: refs, state, end). */
#ifndef SBX_FLEET_PRIV_H
#define SBX_FLEET_PRIV_H

#include "fleet.h"

#endif
