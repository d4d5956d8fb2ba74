#!/usr/bin/env bash
# The C++ install route exactly as the README gives it: the library alone (cmake --preset
# install), installed to a temporary prefix, then examples/cpp configured against the installed
# package (find_package(openfia)), built and run. Once with the static library, once with
# -DBUILD_SHARED_LIBS=ON, whose dynamic symbol table must hold exactly the public API: every
# exported symbol belongs to a declaration marked OPENFIA_API in include/openfia/, and every such
# declaration is exported.
set -euo pipefail
cd "$(dirname "$0")/.."
JOBS=${JOBS:-$(nproc)}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

# The public API's names: every function declared at namespace scope in include/openfia/ (marked
# OPENFIA_API or not: a missing mark shows as a missing export) and every class marked
# OPENFIA_API (the ones with members defined in the library).
api_names() {
  grep -hE '^[A-Za-z_][A-Za-z_0-9:<>, &*]* [A-Za-z_0-9]+\(' include/openfia/*.h |
    grep -vE '^(constexpr|inline|static|template|namespace|struct|class|enum|using|typedef) ' |
    sed -E 's/\(.*//; s/.* //'
  grep -hoE '(struct|class) OPENFIA_API [A-Za-z_0-9]+' include/openfia/*.h | sed 's/.* //'
}

# Each exported symbol, demangled, as the API name it belongs to: "openfia::Foo(...)" and
# "openfia::Foo::bar(...)" -> Foo; "typeinfo for openfia::Foo" -> Foo. Anything else as it is.
exported_names() {
  nm -D --defined-only "$1" | awk '{print $3}' | c++filt |
    sed -E 's/^(typeinfo name for|typeinfo for|vtable for) //' |
    sed -E 's/^openfia::([A-Za-z_0-9]+).*/\1/'
}

check_exports() {
  local so=$1 bad
  bad=$(comm -13 <(api_names | sort -u) <(exported_names "$so" | sort -u))
  if [ -n "$bad" ]; then
    echo "FAIL: $so exports symbols outside the public API of include/openfia/:" >&2
    echo "$bad" | head -20 >&2
    exit 1
  fi
  bad=$(comm -23 <(api_names | sort -u) <(exported_names "$so" | sort -u))
  if [ -n "$bad" ]; then
    echo "FAIL: $so does not export these public declarations (OPENFIA_API missing?):" >&2
    echo "$bad" >&2
    exit 1
  fi
  echo "exports: $(nm -D --defined-only "$so" | wc -l) symbols, all of the public API ($(api_names | sort -u | wc -l) names)"
}

for kind in static shared; do
  shared=OFF
  [ "$kind" = shared ] && shared=ON
  prefix=$TMP/prefix-$kind
  echo "== C++ install route: $kind library =="
  cmake --preset install -DBUILD_SHARED_LIBS=$shared >/dev/null
  cmake --build build/install -j"$JOBS"
  cmake --install build/install --prefix "$prefix" >/dev/null
  lib=$(find "$prefix" -name "libopenfia.$([ "$kind" = static ] && echo a || echo so)")
  [ -n "$lib" ] || { echo "FAIL: the $kind library is not installed under $prefix" >&2; exit 1; }
  [ "$kind" = static ] || check_exports "$lib"
  cmake -S examples/cpp -B "$TMP/example-$kind" -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
  cmake --build "$TMP/example-$kind" -j"$JOBS"
  exe=$TMP/example-$kind/openfia_example
  # ldd's output is taken whole first: under pipefail, grep -q closing the pipe early can make
  # ldd die of SIGPIPE and the pipeline fail although the line was found.
  deps=$(ldd "$exe")
  if [ "$kind" = shared ] && ! grep -q "$prefix/.*libopenfia.so" <<<"$deps"; then
    echo "FAIL: $exe is not linked against the installed libopenfia.so:" >&2
    echo "$deps" >&2
    exit 1
  fi
  "$exe"
done
echo "C++ install route: static and shared OK"
