// libraft's C API (canonical/raft 0.15, Debian's libraft-dev), whose header lacks C++ linkage
// guards. Include this, not <raft.h>.
#pragma once

extern "C" {
#include <raft.h>
}
