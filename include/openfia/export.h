// openfia: OPENFIA_API marks the public API. The library is compiled with hidden visibility, so
// a shared libopenfia exports exactly the declarations that carry this mark.
#pragma once

#if defined(__GNUC__) || defined(__clang__)
#define OPENFIA_API __attribute__((visibility("default")))
#else
#define OPENFIA_API
#endif
