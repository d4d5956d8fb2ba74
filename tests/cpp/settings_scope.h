// openfia tests: a runtime setting changed for one scope and restored at its end.
#pragma once

#include "openfia/runtime.h"

namespace openfia::testutil {

class ImplScope {
 public:
  explicit ImplScope(Impl i) : prev_(GetImpl()) { SetImpl(i); }
  ~ImplScope() { SetImpl(prev_); }
  ImplScope(const ImplScope&) = delete;
  ImplScope& operator=(const ImplScope&) = delete;

 private:
  Impl prev_;
};

class ThreadsScope {
 public:
  explicit ThreadsScope(int n) : prev_(GetNumThreads()) { SetNumThreads(n); }
  ~ThreadsScope() { SetNumThreads(prev_); }
  ThreadsScope(const ThreadsScope&) = delete;
  ThreadsScope& operator=(const ThreadsScope&) = delete;

 private:
  int prev_;
};

class NpuStrictScope {
 public:
  explicit NpuStrictScope(bool on) : prev_(GetNpuStrict()) { SetNpuStrict(on); }
  ~NpuStrictScope() { SetNpuStrict(prev_); }
  NpuStrictScope(const NpuStrictScope&) = delete;
  NpuStrictScope& operator=(const NpuStrictScope&) = delete;

 private:
  bool prev_;
};

}  // namespace openfia::testutil
