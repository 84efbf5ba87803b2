#pragma once
// The event-log names of in-memory checkpoints (--event-log), in one place.

namespace ctrun::agent::checkpoint {

inline constexpr const char* kEventHeld = "checkpoint_held";        // an attempt starts: the steps each rank holds
inline constexpr const char* kEventCommit = "checkpoint_commit";    // a rank's save of a step is complete
inline constexpr const char* kEventLoad = "checkpoint_load";        // a rank loaded a step (or found none)
inline constexpr const char* kEventRefused = "checkpoint_refused";  // a save failed (over the limit, ...)

}  // namespace ctrun::agent::checkpoint
