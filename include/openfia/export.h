// openfia: OPENFIA_API marks the public API. The library is compiled with hidden visibility and
// OPENFIA_BUILDING_LIBRARY, so a shared libopenfia exports exactly the declarations that carry
// this mark. For code that uses the library the mark is empty: a program or module compiled
// with hidden visibility (the Python extension) keeps its own copies of the API's inline
// functions to itself.
#pragma once

#if defined(OPENFIA_BUILDING_LIBRARY) && (defined(__GNUC__) || defined(__clang__))
#define OPENFIA_API __attribute__((visibility("default")))
#else
#define OPENFIA_API
#endif
