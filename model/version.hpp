#pragma once

// The version of cmdbus this library was built as (the project's version in
// CMakeLists.txt).

namespace cmdbus {

/// Returns the version, e.g. "0.1.0".
const char* version() noexcept;

} // namespace cmdbus
