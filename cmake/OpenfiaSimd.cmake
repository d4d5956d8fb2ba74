# Per-ISA targets for src/engine/kernels/*/*_<target>.cc. The whole library, those files included,
# is compiled for the baseline ISA; each per-ISA file switches its own kernels to the target's
# instructions with `#pragma GCC target(...)` after its includes (the same feature list as below),
# so that no inline function of a shared header or std template is ever emitted with the target's
# instructions (the linker keeps one copy of such functions for the whole program: with the flags on
# the command line it could keep the AVX-512 copy and hand it to a baseline caller, SIGILL on an
# AVX2 CPU). The flags below only check that the compiler supports the target. A target the compiler
# cannot build is dropped (its dispatch entry reports absent): each such file must wrap its body in
# `#if defined(OPENFIA_HAVE_<TARGET>)`.
include(CheckCXXCompilerFlag)
set(_openfia_x86 OFF)
if(CMAKE_SYSTEM_PROCESSOR MATCHES "x86_64|AMD64|amd64")
  set(_openfia_x86 ON)
endif()

set(OPENFIA_FLAGS_avx2 "-mavx2;-mfma;-mf16c")
set(OPENFIA_FLAGS_avx512 "-mavx512f;-mavx512bw;-mavx512vl;-mavx512dq;-mfma;-mf16c")
set(OPENFIA_FLAGS_avx512bf16 "-mavx512f;-mavx512bw;-mavx512vl;-mavx512dq;-mavx512bf16;-mavx512vnni;-mfma;-mf16c")
set(OPENFIA_FLAGS_avx512fp16 "-mavx512f;-mavx512bw;-mavx512vl;-mavx512dq;-mavx512fp16;-mavx512bf16;-mavx512vnni;-mfma;-mf16c")
set(OPENFIA_FLAGS_amx "-mavx512f;-mavx512bw;-mavx512vl;-mavx512dq;-mavx512bf16;-mavx512vnni;-mamx-tile;-mamx-bf16;-mfma;-mf16c")
set(OPENFIA_FLAGS_neon "")
set(OPENFIA_FLAGS_neonbf16 "-march=armv8.2-a+bf16")

function(openfia_apply_simd_flags sources)
  foreach(tgt avx2 avx512 avx512bf16 avx512fp16 amx neon neonbf16)
    string(TOUPPER ${tgt} TGT)
    set(ok OFF)
    if(OPENFIA_SIMD)
      set(arm_tgt OFF)
      if(tgt MATCHES "^neon")
        set(arm_tgt ON)
      endif()
      if(_openfia_x86 AND NOT arm_tgt)
        string(REPLACE ";" " " flagstr "${OPENFIA_FLAGS_${tgt}}")
        check_cxx_compiler_flag("${flagstr}" OPENFIA_CC_HAS_${TGT})
        set(ok ${OPENFIA_CC_HAS_${TGT}})
      elseif(CMAKE_SYSTEM_PROCESSOR MATCHES "aarch64|arm64" AND tgt STREQUAL "neon")
        set(ok ON)
      elseif(CMAKE_SYSTEM_PROCESSOR MATCHES "aarch64|arm64" AND arm_tgt)
        string(REPLACE ";" " " flagstr "${OPENFIA_FLAGS_${tgt}}")
        check_cxx_compiler_flag("${flagstr}" OPENFIA_CC_HAS_${TGT})
        set(ok ${OPENFIA_CC_HAS_${TGT}})
      endif()
    endif()
    foreach(src ${sources})
      if(src MATCHES "/src/engine/kernels/.*_${tgt}\\.cc$")
        if(ok)
          set_source_files_properties(${src} PROPERTIES COMPILE_DEFINITIONS OPENFIA_HAVE_${TGT}=1)
        endif()
      endif()
    endforeach()
    if(ok)
      target_compile_definitions(openfia PRIVATE OPENFIA_BUILT_${TGT}=1)
    endif()
  endforeach()
endfunction()
