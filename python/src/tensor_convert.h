// openfia Python bindings: the conversions every operator's binding shares. A tensor argument
// arrives through DLPack as nb::ndarray and becomes a non-owning openfia::TensorView; keyword
// arguments named as in the torch_npu schema fill an arguments struct through tables of fields;
// output specs become dicts. Misuse of the binding itself (a non-CPU tensor, an unknown keyword,
// a dtype without an openfia equivalent) raises ValueError here; every rule of an operator is the
// C++ library's and raises openfia.OpenfiaError through the translator bindings.cc registers.
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "openfia/openfia.h"

namespace openfia::py {

namespace nb = nanobind;

using Array = nb::ndarray<nb::ro>;

[[noreturn]] void BindingError(const std::string& msg);

// The module's exception types (bindings.cc creates them): openfia.OpenfiaError (a ValueError),
// openfia.OpenfiaTypeError (also a TypeError: an argument of the wrong kind) and
// openfia.OpenfiaResourceError (also a MemoryError: ErrorCode::kResourceExhausted). Each carries
// argument, rule, actual and code, as openfia::Error does.
struct ErrorTypes {
  nb::object error, type_error, resource_error;
};
ErrorTypes& Errors();
// Raises openfia.OpenfiaTypeError "<op>: argument '<name>': <rule> (got <actual>)".
[[noreturn]] void ArgTypeError(const char* op, const char* name, const std::string& rule,
                               const std::string& actual);

// Scalar arguments, strictly: an int (or anything with __index__: numpy integers) within int64
// (an int beyond it is an openfia::Error naming the argument, never a bare std::bad_cast); a
// float or an int for a double; a bool; a str. Anything else is ArgTypeError.
int64_t ToInt64(nb::handle v, const char* op, const char* name);
double ToDouble(nb::handle v, const char* op, const char* name);
bool ToBool(nb::handle v, const char* op, const char* name);
std::string ToString(nb::handle v, const char* op, const char* name);

// Holds the ndarrays (and so the producers' buffers) alive while a call uses their views.
struct Keepalive {
  std::vector<Array> arrays;
};

// A tensor argument (None -> an absent view). It is an ndarray or a pair (ndarray, dtype name)
// whose name overrides the DLPack dtype of a same-size view (uint8 storage of hifloat8, or of
// float8 where DLPack lacks it); `override_dtype` does the same from C++ (KvQuantSparseFlash-
// Attention's key_hifloat8/value_hifloat8 flags).
TensorView ToView(nb::handle obj, const char* name, Keepalive& keep,
                  std::optional<DType> override_dtype = std::nullopt);

// A sequence of tensors (None -> empty); each element is named `name` in errors.
std::vector<TensorView> ToViewList(nb::handle obj, const char* name, Keepalive& keep);

// A list of ints (None -> nullopt), each as ToInt64.
std::optional<std::vector<int64_t>> ToIntList(nb::handle obj, const char* op, const char* name);

// Keyword -> member tables of an arguments struct.
template <typename Args>
struct TensorField {
  const char* name;
  TensorView Args::*field;
};
template <typename Args>
struct IntField {
  const char* name;
  int64_t Args::*field;
};

// Sets the member of `a` that the tables name `name` from `v`; false when neither table has it
// (the caller then handles its other keywords, or raises for an unknown one).
template <typename Args>
bool SetTableField(Args& a, const std::string& name, nb::handle v,
                   std::span<const TensorField<Args>> tensors,
                   std::span<const IntField<Args>> ints, Keepalive& keep, const char* op) {
  for (const TensorField<Args>& f : tensors) {
    if (name == f.name) {
      a.*(f.field) = ToView(v, f.name, keep);
      return true;
    }
  }
  for (const IntField<Args>& f : ints) {
    if (name == f.name) {
      a.*(f.field) = ToInt64(v, op, f.name);
      return true;
    }
  }
  return false;
}

[[noreturn]] void UnexpectedKeyword(const std::string& name);

// {attention_out_sizes, attention_out_dtype} plus, when `lse_sizes` is given,
// {softmax_lse_sizes, softmax_lse_dtype = "float32"}: what the Python front ends allocate.
nb::dict OutputSpecDict(const std::vector<int64_t>& out_sizes, DType out_dtype,
                        const std::vector<int64_t>* lse_sizes = nullptr);

// A caller-allocated output of a compute binding: the Python object and its argument name.
struct Output {
  nb::handle obj;
  const char* name;
};

// The arguments builder of one operator: keyword arguments -> its arguments struct.
template <typename Args>
using ArgsBuilder = Args (*)(const nb::kwargs& kw, Keepalive& keep);

// Builds the arguments from `kw` and returns `spec_fn(args)`, run with the GIL released (the
// library touches no Python object; `keep` pins the buffers the views point into).
template <typename Args, typename SpecFn>
auto OutputSpecOf(ArgsBuilder<Args> build, const nb::kwargs& kw, SpecFn spec_fn) {
  Keepalive keep;
  const Args args = build(kw, keep);
  nb::gil_scoped_release release;
  return spec_fn(args);
}

// Builds the arguments from `kw`, converts the outputs (in order: their errors come in that
// order) and runs `op(args, output views...)` with the GIL released, so other Python threads
// run meanwhile.
template <typename Args, typename Op, typename... Outputs>
void Compute(ArgsBuilder<Args> build, const nb::kwargs& kw, Op op, const Outputs&... outputs) {
  Keepalive keep;
  const Args args = build(kw, keep);
  // A braced list evaluates left to right, so the outputs are checked in the order given.
  const TensorView views[] = {ToView(outputs.obj, outputs.name, keep)...};
  nb::gil_scoped_release release;
  [&]<size_t... I>(std::index_sequence<I...>) { op(args, views[I]...); }
  (std::index_sequence_for<Outputs...>{});
}

// An output the Python front end allocates: `alloc(sizes, dtype name, output name)` returns
// (tensor, DLPack capsule of it). The tensor goes back to the caller; the view points into it.
struct Allocated {
  nb::object tensor;
  TensorView view;
};
Allocated AllocOutput(nb::handle alloc, const std::vector<int64_t>& sizes, DType dtype,
                      const char* name, Keepalive& keep);

// attention_out, and softmax_lse (float32) when the spec has one, allocated through `alloc`.
template <typename Spec>
std::vector<Allocated> AllocOutputs(nb::handle alloc, const Spec& spec, Keepalive& keep) {
  std::vector<Allocated> o;
  o.push_back(AllocOutput(alloc, spec.attention_out_sizes, spec.attention_out_dtype,
                          "attention_out", keep));
  if constexpr (requires { spec.softmax_lse_sizes; })
    o.push_back(AllocOutput(alloc, spec.softmax_lse_sizes, DType::kFloat32, "softmax_lse", keep));
  return o;
}

// One operator call in one crossing: builds the arguments, validates them once (`spec_fn`
// returns the output spec), allocates the outputs through `alloc` (AllocOutputs, GIL held), runs
// `op(args, outputs)` with the GIL released and returns the output tensors as a tuple. Replaces
// an output-spec call plus a compute call, which converted every input twice and validated
// twice (~40 us of a decode call's ~155 us).
template <typename Args, typename SpecFn, typename Op>
nb::tuple SpecAllocCompute(ArgsBuilder<Args> build, const nb::kwargs& kw, nb::handle alloc,
                           SpecFn spec_fn, Op op) {
  Keepalive keep;
  const Args args = build(kw, keep);
  const std::vector<Allocated> outs = AllocOutputs(alloc, spec_fn(args), keep);
  {
    nb::gil_scoped_release release;
    op(args, outs);
  }
  nb::list result;
  for (const Allocated& a : outs) result.append(a.tensor);
  return nb::tuple(result);
}

}  // namespace openfia::py
