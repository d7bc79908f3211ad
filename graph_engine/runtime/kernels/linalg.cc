// Dense linear algebra per matrix of a batch (reference: graph_engine/ops/linalg.py), with the
// Eigen decompositions TF's CPU kernels use (tensorflow/core/kernels/linalg): PartialPivLU for
// inverses, solves, determinants and Lu, LLT for Cholesky, HouseholderQR, BDCSVD,
// SelfAdjointEigenSolver, the real-Schur matrix square root; the banded and tridiagonal solvers
// are TF's own loops. Same algorithm, same row-major matrices: the same answers,
// signs of Qr/Svd/eigenvectors and the NaN/inf of edge inputs included. float16 inputs are
// computed in float32 and rounded on store, like every NPU kernel.
//
// TF's CPU kernels are built without FMA, and the decompositions must round as they do: a fused
// a - l * u leaves residues (1e30 on a nearly singular 3e38 matrix) where TF's LU pivot is exactly
// 0, and finite values where TF's Householder products overflow to inf. So Eigen is compiled here
// without FMA (neither its fmadd packets nor contracted a * b + c), in a namespace of its own (as
// gemm_avx512.cc: its template instances must not merge with the FMA ones of other units).
#pragma GCC optimize("fp-contract=off")
#undef __FMA__
#define Eigen NpuEigenNoFma

#include <Eigen/Cholesky>
#include <Eigen/Dense>
#include <Eigen/Eigenvalues>
#include <Eigen/LU>
#include <Eigen/QR>
#include <Eigen/SVD>
#include <unsupported/Eigen/MatrixFunctions>

#include <xmmintrin.h>

#include <atomic>
#include <cmath>
#include <limits>
#include <mutex>
#include <string>
#include <vector>

#include "kernels/dtype.h"
#include "kernels/shape.h"
#include "kernels/thread_pool.h"

namespace npu {
namespace kernels {
namespace {

using Matrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using MatrixMap = Eigen::Map<Matrix>;
using ConstMatrixMap = Eigen::Map<const Matrix>;

// The matrices of one batch element: inputs (read-only) and outputs, float32, row-major.
struct Mats {
  std::vector<const float*> in;
  std::vector<float*> out;
  ConstMatrixMap In(int i, int64_t rows, int64_t cols) const { return ConstMatrixMap(in[i], rows, cols); }
  MatrixMap Out(int i, int64_t rows, int64_t cols) const { return MatrixMap(out[i], rows, cols); }
};

// Denormals kept (MXCSR's DAZ and FTZ off) while the scope lives, where TF's kernel switches
// the runtime's flushing off (ScopedDontFlushDenormal: the eigensolver "relies on denormals", it
// scales a 3e38 matrix into them).
class KeepDenormalsScope {
 public:
  KeepDenormalsScope() : saved_(_mm_getcsr()) { _mm_setcsr(saved_ & ~(kDenormalsAreZero | kFlushToZero)); }
  ~KeepDenormalsScope() { _mm_setcsr(saved_); }

 private:
  static constexpr unsigned kDenormalsAreZero = 0x0040, kFlushToZero = 0x8000;
  unsigned saved_;
};

// Runs a per-matrix function over the broadcast batch of its inputs. Subclasses validate
// shapes in their factory, then call Plan() with the number of matrix dimensions of each
// operand (2 for matrices, 1 for vectors, 0 for scalars per batch element).
class BatchedKernel : public Kernel {
 public:
  Status Compute(const KernelArgs& args) const override {
    std::vector<std::vector<float>> in(in_dtypes_.size()), out(out_dtypes_.size());
    for (size_t i = 0; i < in.size(); ++i) {
      in[i].resize(in_size_[i]);
      Load<float>(in_dtypes_[i], args.in(i), in_size_[i], in[i].data());
    }
    for (size_t i = 0; i < out.size(); ++i) out[i].assign(out_size_[i], 0.f);
    NPU_RETURN_IF_ERROR(Check(in));
    std::mutex mu;
    Status first = Status::Ok();
    std::atomic<bool> failed{false};
    ParallelFor(batch_, cost_, [&](int64_t b0, int64_t b1) {
      Mats m;
      m.in.resize(in.size());
      m.out.resize(out.size());
      for (int64_t b = b0; b < b1 && !failed; ++b) {
        for (size_t i = 0; i < in.size(); ++i) m.in[i] = in[i].data() + in_offsets_[i][b] * in_mat_[i];
        for (size_t i = 0; i < out.size(); ++i) m.out[i] = out[i].data() + b * out_mat_[i];
        Status s = One(m);
        if (!s.ok()) {
          std::lock_guard<std::mutex> lock(mu);
          if (!failed) first = s;
          failed = true;
        }
      }
    });
    if (failed) return first;
    for (size_t i = 0; i < out.size(); ++i) Store<float>(out_dtypes_[i], out[i].data(), out_size_[i], args.out(i));
    return Status::Ok();
  }

 protected:
  virtual Status One(const Mats& m) const = 0;
  // Checks on the whole loaded inputs, before any matrix is computed.
  virtual Status Check(const std::vector<std::vector<float>>& in) const { return Status::Ok(); }

  // `matrix_rank[i]`: trailing dimensions of operand i (inputs, then outputs) that form one
  // matrix; the leading ones are the batch (inputs broadcast to the outputs' batch).
  Status Plan(const KernelDef& def, const std::vector<int>& in_rank, const std::vector<int>& out_rank,
              int64_t cost) {
    Dims batch;
    for (size_t i = 0; i < def.outputs.size(); ++i) {
      const Dims& d = def.outputs[i].dims;
      if (static_cast<int>(d.size()) < out_rank[i]) return Error("output ", i, " ", ShapeString(d), " has too few dimensions");
      Dims b(d.begin(), d.end() - out_rank[i]);
      if (i == 0) batch = b;
      else if (b != batch) return Error("outputs have different batch shapes");
      out_dtypes_.push_back(def.outputs[i].dtype);
      out_size_.push_back(NumElements(d));
      out_mat_.push_back(NumElements(Dims(d.end() - out_rank[i], d.end())));
    }
    batch_ = NumElements(batch);
    const Dims out_strides = RowMajorStrides(batch);
    for (size_t i = 0; i < def.inputs.size(); ++i) {
      const Dims& d = def.inputs[i].dims;
      if (static_cast<int>(d.size()) < in_rank[i]) return Error("input ", i, " ", ShapeString(d), " has too few dimensions");
      Dims b(d.begin(), d.end() - in_rank[i]), strides;
      NPU_RETURN_IF_ERROR(BroadcastStrides(b, batch, &strides));
      std::vector<int64_t> offsets(batch_);
      for (int64_t k = 0; k < batch_; ++k) {
        int64_t rest = k, off = 0;
        for (size_t a = 0; a < batch.size(); ++a) {
          off += (rest / out_strides[a]) * strides[a];
          rest %= out_strides[a];
        }
        offsets[k] = off;
      }
      in_dtypes_.push_back(def.inputs[i].dtype);
      in_size_.push_back(NumElements(d));
      in_mat_.push_back(NumElements(Dims(d.end() - in_rank[i], d.end())));
      in_offsets_.push_back(std::move(offsets));
    }
    cost_ = std::max<int64_t>(1, cost);
    return Status::Ok();
  }

  static Status Square(const TensorDesc& t, int64_t* n) {
    const Dims& d = t.dims;
    if (d.size() < 2) return InvalidArgument("Input must have rank >= 2, got ", d.size());
    if (d[d.size() - 1] != d[d.size() - 2])
      return InvalidArgument("Input matrix must be square. Got shape ", ShapeString(d));
    *n = d.back();
    return Status::Ok();
  }

  static Status Rows(const TensorDesc& t, int64_t* rows, int64_t* cols) {
    const Dims& d = t.dims;
    if (d.size() < 2) return InvalidArgument("Input must have rank >= 2, got ", d.size());
    *rows = d[d.size() - 2];
    *cols = d.back();
    return Status::Ok();
  }

 private:
  std::vector<int> in_dtypes_, out_dtypes_;
  std::vector<int64_t> in_size_, out_size_, in_mat_, out_mat_;
  std::vector<std::vector<int64_t>> in_offsets_;   // [input][batch element] matrix index
  int64_t batch_ = 0, cost_ = 1;
};

// PartialPivLU of `a` (or its adjoint), failing as TF does on an exactly zero pivot.
Status Lu(const ConstMatrixMap& a, bool adjoint, const char* message, Eigen::PartialPivLU<Matrix>* lu) {
  if (adjoint) lu->compute(a.adjoint());
  else lu->compute(a);
  if (!(lu->matrixLU().diagonal().cwiseAbs().minCoeff() > 0.f)) return InvalidArgument(message);
  return Status::Ok();
}

class InverseKernel : public BatchedKernel {
 public:
  static Status Make(const KernelDef& def, std::unique_ptr<Kernel>* out) {
    NPU_RETURN_IF_ERROR(CheckArity(def, 1, 1));
    auto k = std::make_unique<InverseKernel>();
    NPU_RETURN_IF_ERROR(Square(def.inputs[0], &k->n_));
    NPU_RETURN_IF_ERROR(def.attrs.Bool("adjoint", false, &k->adjoint_));
    NPU_RETURN_IF_ERROR(k->Plan(def, {2}, {2}, k->n_ * k->n_ * k->n_));
    *out = std::move(k);
    return Status::Ok();
  }

 protected:
  Status One(const Mats& m) const override {
    if (n_ == 0) return Status::Ok();
    Eigen::PartialPivLU<Matrix> lu(n_);
    NPU_RETURN_IF_ERROR(Lu(m.In(0, n_, n_), adjoint_, "Input is not invertible.", &lu));
    m.Out(0, n_, n_).noalias() = lu.inverse();
    return Status::Ok();
  }

 private:
  int64_t n_ = 0;
  bool adjoint_ = false;
};

class SolveKernel : public BatchedKernel {
 public:
  static Status Make(const KernelDef& def, std::unique_ptr<Kernel>* out) {
    NPU_RETURN_IF_ERROR(CheckArity(def, 2, 1));
    auto k = std::make_unique<SolveKernel>();
    NPU_RETURN_IF_ERROR(Square(def.inputs[0], &k->n_));
    int64_t rows;
    NPU_RETURN_IF_ERROR(Rows(def.inputs[1], &rows, &k->rhs_));
    if (rows != k->n_)
      return InvalidArgument("Input matrix and right-hand side must have the same number of rows: ", k->n_, " vs. ", rows);
    NPU_RETURN_IF_ERROR(def.attrs.Bool("adjoint", false, &k->adjoint_));
    NPU_RETURN_IF_ERROR(k->Plan(def, {2, 2}, {2}, k->n_ * k->n_ * (k->n_ + k->rhs_)));
    *out = std::move(k);
    return Status::Ok();
  }

 protected:
  Status One(const Mats& m) const override {
    if (n_ == 0 || rhs_ == 0) return Status::Ok();
    Eigen::PartialPivLU<Matrix> lu(n_);
    NPU_RETURN_IF_ERROR(Lu(m.In(0, n_, n_), adjoint_, "Input matrix is not invertible.", &lu));
    m.Out(0, n_, rhs_) = lu.solve(m.In(1, n_, rhs_));
    return Status::Ok();
  }

 private:
  int64_t n_ = 0, rhs_ = 0;
  bool adjoint_ = false;
};

// No singularity check, as on TF's CPU: a zero on the diagonal gives inf/nan.
class TriangularSolveKernel : public BatchedKernel {
 public:
  static Status Make(const KernelDef& def, std::unique_ptr<Kernel>* out) {
    NPU_RETURN_IF_ERROR(CheckArity(def, 2, 1));
    auto k = std::make_unique<TriangularSolveKernel>();
    NPU_RETURN_IF_ERROR(Square(def.inputs[0], &k->n_));
    int64_t rows;
    NPU_RETURN_IF_ERROR(Rows(def.inputs[1], &rows, &k->rhs_));
    if (rows != k->n_)
      return InvalidArgument("Input matrix and right-hand side must have the same number of rows: ", k->n_, " vs. ", rows);
    NPU_RETURN_IF_ERROR(def.attrs.Bool("lower", true, &k->lower_));
    NPU_RETURN_IF_ERROR(def.attrs.Bool("adjoint", false, &k->adjoint_));
    NPU_RETURN_IF_ERROR(k->Plan(def, {2, 2}, {2}, k->n_ * k->n_ * k->rhs_));
    *out = std::move(k);
    return Status::Ok();
  }

 protected:
  Status One(const Mats& m) const override {
    if (n_ == 0 || rhs_ == 0) return Status::Ok();
    const ConstMatrixMap a = m.In(0, n_, n_), b = m.In(1, n_, rhs_);
    MatrixMap x = m.Out(0, n_, rhs_);
    if (lower_) {
      auto t = a.triangularView<Eigen::Lower>();
      if (adjoint_) x.noalias() = t.adjoint().solve(b);
      else x.noalias() = t.solve(b);
    } else {
      auto t = a.triangularView<Eigen::Upper>();
      if (adjoint_) x.noalias() = t.adjoint().solve(b);
      else x.noalias() = t.solve(b);
    }
    return Status::Ok();
  }

 private:
  int64_t n_ = 0, rhs_ = 0;
  bool lower_ = true, adjoint_ = false;
};

// TF's SLogDet as TF's CPU kernel computes it: from the PartialPivLU pivots u, sign =
// det(P) prod(sign(u)) (Eigen's sign: 0 for 0, NaN for NaN) and log|det| = sum(log|u|), nothing
// remapped: a zero pivot gives (0, -inf), an infinite one (±1, inf), a NaN one (NaN, NaN).
void SignLogDet(const ConstMatrixMap& a, float* sign, float* log_abs_det) {
  *sign = 1.f;
  *log_abs_det = 0.f;
  if (a.rows() == 0) return;
  Eigen::PartialPivLU<Matrix> lu(a);
  *sign = static_cast<float>(lu.permutationP().determinant());
  for (int64_t i = 0; i < a.rows(); ++i) {
    const float u = lu.matrixLU()(i, i);
    *sign *= Eigen::numext::sign(u);
    *log_abs_det += std::log(std::abs(u));
  }
}

class DeterminantKernel : public BatchedKernel {
 public:
  static Status Make(const KernelDef& def, bool log, std::unique_ptr<Kernel>* out) {
    NPU_RETURN_IF_ERROR(CheckArity(def, 1, log ? 2 : 1));
    auto k = std::make_unique<DeterminantKernel>();
    NPU_RETURN_IF_ERROR(Square(def.inputs[0], &k->n_));
    k->log_ = log;
    NPU_RETURN_IF_ERROR(k->Plan(def, {2}, std::vector<int>(log ? 2 : 1, 0), k->n_ * k->n_ * k->n_));
    *out = std::move(k);
    return Status::Ok();
  }

 protected:
  Status One(const Mats& m) const override {
    const ConstMatrixMap a = m.In(0, n_, n_);
    if (log_) {
      SignLogDet(a, m.out[0], m.out[1]);
      return Status::Ok();
    }
    // sign * exp(log|det|), as TF's CPU kernel: an infinite or NaN determinant is a result
    float sign, log_abs_det;
    SignLogDet(a, &sign, &log_abs_det);
    *m.out[0] = sign * std::exp(log_abs_det);
    return Status::Ok();
  }

 private:
  int64_t n_ = 0;
  bool log_ = false;
};

class CholeskyKernel : public BatchedKernel {
 public:
  static Status Make(const KernelDef& def, std::unique_ptr<Kernel>* out) {
    NPU_RETURN_IF_ERROR(CheckArity(def, 1, 1));
    auto k = std::make_unique<CholeskyKernel>();
    NPU_RETURN_IF_ERROR(Square(def.inputs[0], &k->n_));
    NPU_RETURN_IF_ERROR(k->Plan(def, {2}, {2}, k->n_ * k->n_ * k->n_));
    *out = std::move(k);
    return Status::Ok();
  }

 protected:
  Status One(const Mats& m) const override {
    if (n_ == 0) return Status::Ok();
    Eigen::LLT<Matrix, Eigen::Lower> llt(m.In(0, n_, n_));   // reads the lower triangle
    // Not positive definite: no error, NaN in the lower triangle as on TF's CPU (whose upper
    // triangle is then left unwritten; here it stays zero, as in every L).
    if (llt.info() != Eigen::Success)
      m.Out(0, n_, n_).triangularView<Eigen::Lower>().setConstant(std::numeric_limits<float>::quiet_NaN());
    else
      m.Out(0, n_, n_) = llt.matrixL();
    return Status::Ok();
  }

 private:
  int64_t n_ = 0;
};

class QrKernel : public BatchedKernel {
 public:
  static Status Make(const KernelDef& def, std::unique_ptr<Kernel>* out) {
    NPU_RETURN_IF_ERROR(CheckArity(def, 1, 2));
    auto k = std::make_unique<QrKernel>();
    NPU_RETURN_IF_ERROR(Rows(def.inputs[0], &k->m_, &k->n_));
    NPU_RETURN_IF_ERROR(def.attrs.Bool("full_matrices", false, &k->full_));
    NPU_RETURN_IF_ERROR(k->Plan(def, {2}, {2, 2}, k->m_ * k->n_ * std::min(k->m_, k->n_) * 2));
    *out = std::move(k);
    return Status::Ok();
  }

 protected:
  Status One(const Mats& m) const override {
    const int64_t p = std::min(m_, n_), q_cols = full_ ? m_ : p;
    if (m_ == 0 || n_ == 0) {
      if (full_) m.Out(0, m_, m_).setIdentity();   // the Q of an m x 0 matrix
      return Status::Ok();
    }
    Eigen::HouseholderQR<Matrix> qr(m.In(0, m_, n_));
    if (full_) m.Out(0, m_, m_) = qr.householderQ();
    else {
      // A stored identity, as TF: Eigen skips the products with the known zeros of an identity
      // expression, which changes where a NaN of the input spreads
      const Matrix identity = Matrix::Identity(m_, p);
      m.Out(0, m_, p) = qr.householderQ() * identity;
    }
    m.Out(1, q_cols, n_) = qr.matrixQR().block(0, 0, q_cols, n_).triangularView<Eigen::Upper>();
    return Status::Ok();
  }

 private:
  int64_t m_ = 0, n_ = 0;
  bool full_ = false;
};

class EigKernel : public BatchedKernel {
 public:
  static Status Make(const KernelDef& def, std::unique_ptr<Kernel>* out) {
    NPU_RETURN_IF_ERROR(CheckArity(def, 1, 2));
    auto k = std::make_unique<EigKernel>();
    NPU_RETURN_IF_ERROR(Square(def.inputs[0], &k->n_));
    NPU_RETURN_IF_ERROR(def.attrs.Bool("compute_v", true, &k->compute_v_));
    NPU_RETURN_IF_ERROR(k->Plan(def, {2}, {1, k->compute_v_ ? 2 : 0}, 9 * k->n_ * k->n_ * k->n_));
    *out = std::move(k);
    return Status::Ok();
  }

 protected:
  Status One(const Mats& m) const override {
    if (n_ == 0) return Status::Ok();
    KeepDenormalsScope keep;
    Eigen::SelfAdjointEigenSolver<Matrix> eig(m.In(0, n_, n_),
                                              compute_v_ ? Eigen::ComputeEigenvectors : Eigen::EigenvaluesOnly);
    if (eig.info() != Eigen::Success)
      return InvalidArgument("Self-adjoint eigen decomposition was not successful. The input might not be valid.");
    m.Out(0, n_, 1) = eig.eigenvalues();
    if (compute_v_) m.Out(1, n_, n_) = eig.eigenvectors();
    return Status::Ok();
  }

 private:
  int64_t n_ = 0;
  bool compute_v_ = true;
};

class SvdKernel : public BatchedKernel {
 public:
  static Status Make(const KernelDef& def, std::unique_ptr<Kernel>* out) {
    NPU_RETURN_IF_ERROR(CheckArity(def, 1, 3));
    auto k = std::make_unique<SvdKernel>();
    NPU_RETURN_IF_ERROR(Rows(def.inputs[0], &k->m_, &k->n_));
    NPU_RETURN_IF_ERROR(def.attrs.Bool("compute_uv", true, &k->compute_uv_));
    NPU_RETURN_IF_ERROR(def.attrs.Bool("full_matrices", false, &k->full_));
    const int uv = k->compute_uv_ ? 2 : 0;
    NPU_RETURN_IF_ERROR(k->Plan(def, {2}, {1, uv, uv}, 12 * std::max(k->m_, k->n_) * k->m_ * k->n_));
    *out = std::move(k);
    return Status::Ok();
  }

 protected:
  Status One(const Mats& m) const override {
    const int64_t p = std::min(m_, n_);
    if (p == 0) {
      // U or V of the nonempty side is the identity, as on TF's CPU
      if (compute_uv_ && full_) {
        if (m_ > 0) m.Out(1, m_, m_).setIdentity();
        else m.Out(2, n_, n_).setIdentity();
      }
      return Status::Ok();
    }
    const ConstMatrixMap a = m.In(0, m_, n_);
    if (!compute_uv_) return Write(Eigen::BDCSVD<Matrix>(a), m);
    if (full_) return Write(Eigen::BDCSVD<Matrix, Eigen::ComputeFullU | Eigen::ComputeFullV>(a), m);
    return Write(Eigen::BDCSVD<Matrix, Eigen::ComputeThinU | Eigen::ComputeThinV>(a), m);
  }

 private:
  template <class Svd>
  Status Write(const Svd& svd, const Mats& m) const {
    const int64_t p = std::min(m_, n_), u_cols = full_ ? m_ : p, v_cols = full_ ? n_ : p;
    const float nan = std::numeric_limits<float>::quiet_NaN();
    const bool ok = svd.info() == Eigen::Success;   // TF fills NaN on failure
    if (ok) m.Out(0, p, 1) = svd.singularValues();
    else m.Out(0, p, 1).fill(nan);
    if (compute_uv_) {
      if (ok) {
        m.Out(1, m_, u_cols) = svd.matrixU();
        m.Out(2, n_, v_cols) = svd.matrixV();
      } else {
        m.Out(1, m_, u_cols).fill(nan);
        m.Out(2, n_, v_cols).fill(nan);
      }
    }
    return Status::Ok();
  }

  int64_t m_ = 0, n_ = 0;
  bool compute_uv_ = true, full_ = false;
};

class SquareRootKernel : public BatchedKernel {
 public:
  static Status Make(const KernelDef& def, std::unique_ptr<Kernel>* out) {
    NPU_RETURN_IF_ERROR(CheckArity(def, 1, 1));
    auto k = std::make_unique<SquareRootKernel>();
    NPU_RETURN_IF_ERROR(Square(def.inputs[0], &k->n_));
    NPU_RETURN_IF_ERROR(k->Plan(def, {2}, {2}, 30 * k->n_ * k->n_ * k->n_));
    *out = std::move(k);
    return Status::Ok();
  }

 protected:
  Status One(const Mats& m) const override {
    if (n_ == 0) return Status::Ok();
    const Matrix a = m.In(0, n_, n_);
    m.Out(0, n_, n_) = a.sqrt();      // real Schur form, then the quasi-triangular root
    return Status::Ok();
  }

 private:
  int64_t n_ = 0;
};

// CholeskyGrad: S = L^-T Phi(L^T tril(grad)) L^-1, Phi taking the lower triangle with its
// diagonal halved (Murray 2016, "Differentiation of the Cholesky decomposition"), returned
// symmetric as (S + S^T) / 2 like TF's; two triangular solves, no inverse. Only lower triangles
// are read.
class CholeskyGradKernel : public BatchedKernel {
 public:
  static Status Make(const KernelDef& def, std::unique_ptr<Kernel>* out) {
    NPU_RETURN_IF_ERROR(CheckArity(def, 2, 1));
    auto k = std::make_unique<CholeskyGradKernel>();
    NPU_RETURN_IF_ERROR(Square(def.inputs[0], &k->n_));
    if (def.inputs[1].dims != def.inputs[0].dims)
      return InvalidArgument("Inputs (L and grad) must have the same shape: ", ShapeString(def.inputs[0].dims), " vs. ",
                             ShapeString(def.inputs[1].dims));
    NPU_RETURN_IF_ERROR(k->Plan(def, {2, 2}, {2}, 4 * k->n_ * k->n_ * k->n_));
    *out = std::move(k);
    return Status::Ok();
  }

 protected:
  Status One(const Mats& m) const override {
    const int64_t size = n_;
    if (size == 0) return Status::Ok();
    const Matrix l = m.In(0, size, size).triangularView<Eigen::Lower>();
    const Matrix grad = m.In(1, size, size).triangularView<Eigen::Lower>();
    Matrix phi = (l.transpose() * grad).triangularView<Eigen::Lower>();
    phi.diagonal() *= 0.5f;
    const auto lt = l.transpose().triangularView<Eigen::Upper>();
    const Matrix left = lt.solve(phi);                               // L^-T Phi
    const Matrix s = lt.solve(Matrix(left.transpose())).transpose();  // (L^-T Phi) L^-1
    m.Out(0, size, size) = 0.5f * (s + s.transpose());
    return Status::Ok();
  }

 private:
  int64_t n_ = 0;
};

// Lu: the packed L\U of PartialPivLU and p with input[p] = L U (the inverse of Eigen's P).
class LuKernel : public BatchedKernel {
 public:
  static Status Make(const KernelDef& def, std::unique_ptr<Kernel>* out) {
    NPU_RETURN_IF_ERROR(CheckArity(def, 1, 2));
    auto k = std::make_unique<LuKernel>();
    NPU_RETURN_IF_ERROR(Square(def.inputs[0], &k->n_));
    NPU_RETURN_IF_ERROR(k->Plan(def, {2}, {2, 1}, k->n_ * k->n_ * k->n_));
    *out = std::move(k);
    return Status::Ok();
  }

 protected:
  Status One(const Mats& m) const override {
    if (n_ == 0) return Status::Ok();
    Eigen::PartialPivLU<Matrix> lu(n_);
    NPU_RETURN_IF_ERROR(Lu(m.In(0, n_, n_), false, "Input is not invertible.", &lu));
    m.Out(0, n_, n_) = lu.matrixLU();
    const auto& moved = lu.permutationP().indices();
    for (int64_t i = 0; i < n_; ++i) m.out[1][moved[i]] = static_cast<float>(i);  // stored as the index dtype
    return Status::Ok();
  }

 private:
  int64_t n_ = 0;
};

// TF's band storage (LEFT_RIGHT): row r of the K x M bands holds diagonal -r, right-aligned
// (lower: row 0 is the main diagonal), or diagonal K-1-r, left-aligned (upper: row K-1). TF's
// band-limited substitution, term by term: entries outside the band are never multiplied (a
// dense solve would turn 0 * inf into NaN), bands beyond the matrix (K > M) are ignored.
class BandedSolveKernel : public BatchedKernel {
 public:
  static Status Make(const KernelDef& def, std::unique_ptr<Kernel>* out) {
    NPU_RETURN_IF_ERROR(CheckArity(def, 2, 1));
    auto k = std::make_unique<BandedSolveKernel>();
    int64_t rows;
    NPU_RETURN_IF_ERROR(Rows(def.inputs[0], &k->bands_, &k->n_));
    NPU_RETURN_IF_ERROR(Rows(def.inputs[1], &rows, &k->rhs_));
    if (NumElements(def.inputs[0].dims) == 0 || NumElements(def.inputs[1].dims) == 0)
      return InvalidArgument("In[0] and In[1] must not be empty tensors");
    if (rows != k->n_) return InvalidArgument("In[0] mismatch In[1] shape: ", k->n_, " vs. ", rows);
    NPU_RETURN_IF_ERROR(def.attrs.Bool("lower", true, &k->lower_));
    NPU_RETURN_IF_ERROR(def.attrs.Bool("adjoint", false, &k->adjoint_));
    NPU_RETURN_IF_ERROR(k->Plan(def, {2, 2}, {2}, k->bands_ * k->n_ * k->rhs_));
    *out = std::move(k);
    return Status::Ok();
  }

 protected:
  // TF checks the main diagonal of the first matrix of the batch only (the others may divide by
  // zero), with the same Eigen reduction (its NaN handling included).
  Status Check(const std::vector<std::vector<float>>& in) const override {
    const ConstMatrixMap first(in[0].data(), bands_, n_);
    const float min_abs_pivot = first.row(lower_ ? 0 : bands_ - 1).cwiseAbs().minCoeff();
    if (!(min_abs_pivot > 0.f)) return InvalidArgument("Input matrix is not invertible.");
    return Status::Ok();
  }

  Status One(const Mats& m) const override {
    const ConstMatrixMap a = m.In(0, bands_, n_), b = m.In(1, n_, rhs_);
    MatrixMap x = m.Out(0, n_, rhs_);
    const int64_t n = n_, k = bands_;
    // As TF: without adjoint, b_i minus the band's dot product; with adjoint, one term at a time.
    Eigen::RowVectorXf dot(rhs_);
    if (lower_ && !adjoint_) {          // forward: x_i = (b_i - sum_j A(i, j) x_j) / A(i, i)
      for (int64_t i = 0; i < n; ++i) {
        dot.setZero();
        for (int64_t j = std::max<int64_t>(0, i - (k - 1)); j < i; ++j) dot += a(i - j, i) * x.row(j);
        x.row(i) = (b.row(i) - dot) / a(0, i);
      }
    } else if (lower_) {                // backward with A^T: A(j, i) is at a(j - i, j)
      for (int64_t i = n - 1; i >= 0; --i) {
        x.row(i) = b.row(i);
        for (int64_t j = i + 1; j < std::min(n, i + k); ++j) x.row(i) -= a(j - i, j) * x.row(j);
        x.row(i) /= a(0, i);
      }
    } else if (!adjoint_) {             // backward: A(i, j) is at a(k - 1 - (j - i), i)
      for (int64_t i = n - 1; i >= 0; --i) {
        dot.setZero();
        for (int64_t j = i + 1; j < std::min(n, i + k); ++j) dot += a(k - 1 - (j - i), i) * x.row(j);
        x.row(i) = (b.row(i) - dot) / a(k - 1, i);
      }
    } else {                            // forward with A^T: A(j, i) is at a(k - 1 - (i - j), j)
      for (int64_t i = 0; i < n; ++i) {
        x.row(i) = b.row(i);
        for (int64_t j = std::max<int64_t>(0, i - (k - 1)); j < i; ++j) x.row(i) -= a(k - 1 - (i - j), j) * x.row(j);
        x.row(i) /= a(k - 1, i);
      }
    }
    return Status::Ok();
  }

 private:
  int64_t bands_ = 0, n_ = 0, rhs_ = 0;
  bool lower_ = true, adjoint_ = false;
};

class TridiagonalMatMulKernel : public BatchedKernel {
 public:
  static Status Make(const KernelDef& def, std::unique_ptr<Kernel>* out) {
    NPU_RETURN_IF_ERROR(CheckArity(def, 4, 1));
    auto k = std::make_unique<TridiagonalMatMulKernel>();
    NPU_RETURN_IF_ERROR(Rows(def.inputs[3], &k->m_, &k->n_));
    for (int i = 0; i < 3; ++i)
      if (NumElements(def.inputs[i].dims) != NumElements(def.inputs[3].dims) / std::max<int64_t>(1, k->n_) ||
          def.inputs[i].dims.back() != k->m_)
        return InvalidArgument("diagonal ", i, " ", ShapeString(def.inputs[i].dims), " does not match rhs ",
                               ShapeString(def.inputs[3].dims));
    NPU_RETURN_IF_ERROR(k->Plan(def, {2, 2, 2, 2}, {2}, 3 * k->m_ * k->n_));
    *out = std::move(k);
    return Status::Ok();
  }

 protected:
  Status One(const Mats& m) const override {
    const float *sup = m.in[0], *main = m.in[1], *sub = m.in[2], *rhs = m.in[3];
    float* out = m.out[0];
    for (int64_t i = 0; i < m_; ++i)
      for (int64_t j = 0; j < n_; ++j) {
        float v = main[i] * rhs[i * n_ + j];
        if (i > 0) v += sub[i] * rhs[(i - 1) * n_ + j];
        if (i + 1 < m_) v += sup[i] * rhs[(i + 1) * n_ + j];
        out[i * n_ + j] = v;
      }
    return Status::Ok();
  }

 private:
  int64_t m_ = 0, n_ = 0;
};

// TF's CPU algorithms: Gaussian elimination with partial pivoting (LAPACK's gtsv) or the
// Thomas algorithm; a singular system gives NaN, not an error.
class TridiagonalSolveKernel : public BatchedKernel {
 public:
  static Status Make(const KernelDef& def, std::unique_ptr<Kernel>* out) {
    NPU_RETURN_IF_ERROR(CheckArity(def, 2, 1));
    auto k = std::make_unique<TridiagonalSolveKernel>();
    int64_t three;
    NPU_RETURN_IF_ERROR(Rows(def.inputs[0], &three, &k->m_));
    if (three != 3) return InvalidArgument("Expected 3 diagonals got ", three);
    int64_t rows;
    NPU_RETURN_IF_ERROR(Rows(def.inputs[1], &rows, &k->k_));
    if (rows != k->m_) return InvalidArgument("rhs ", ShapeString(def.inputs[1].dims), " does not match the diagonals");
    bool perturb;
    NPU_RETURN_IF_ERROR(def.attrs.Bool("partial_pivoting", true, &k->pivoting_));
    NPU_RETURN_IF_ERROR(def.attrs.Bool("perturb_singular", false, &perturb));
    if (perturb) return Error("perturb_singular is not supported");
    NPU_RETURN_IF_ERROR(k->Plan(def, {2, 2}, {2}, 8 * k->m_ * k->k_));
    *out = std::move(k);
    return Status::Ok();
  }

 protected:
  Status One(const Mats& m) const override {
    const int64_t n = m_;
    if (n == 0 || k_ == 0) return Status::Ok();
    using Rows = Eigen::Map<const Eigen::ArrayXf>;
    const Rows sup(m.in[0], n), diag(m.in[0] + n, n), sub(m.in[0] + 2 * n, n);
    const ConstMatrixMap rhs = m.In(1, n, k_);
    MatrixMap x = m.Out(0, n, k_);
    if (!(pivoting_ ? Pivoting(sup, diag, sub, rhs, x) : Thomas(sup, diag, sub, rhs, x)))
      x.fill(std::numeric_limits<float>::quiet_NaN());
    return Status::Ok();
  }

 private:
  template <class V>
  static bool Pivoting(const V& sup, const V& diag, const V& sub, const ConstMatrixMap& rhs, MatrixMap& x) {
    const int64_t n = diag.size();
    Eigen::Array<float, Eigen::Dynamic, 3> u(n, 3);
    u(0, 0) = diag(0);
    u(0, 1) = sup(0);
    x.row(0) = rhs.row(0);
    for (int64_t i = 0; i < n - 1; ++i) {
      if (std::abs(u(i, 0)) >= std::abs(sub(i + 1))) {
        if (u(i, 0) == 0.f) return false;
        const float factor = sub(i + 1) / u(i, 0);
        u(i + 1, 0) = diag(i + 1) - factor * u(i, 1);
        x.row(i + 1) = rhs.row(i + 1) - factor * x.row(i);
        if (i != n - 2) {
          u(i + 1, 1) = sup(i + 1);
          u(i, 2) = 0.f;
        }
      } else {   // interchange rows i and i + 1
        const float factor = u(i, 0) / sub(i + 1);
        u(i, 0) = sub(i + 1);
        u(i + 1, 0) = u(i, 1) - factor * diag(i + 1);
        u(i, 1) = diag(i + 1);
        x.row(i + 1) = x.row(i) - factor * rhs.row(i + 1);
        x.row(i) = rhs.row(i + 1);
        if (i != n - 2) {
          u(i, 2) = sup(i + 1);
          u(i + 1, 1) = -factor * sup(i + 1);
        }
      }
    }
    if (u(n - 1, 0) == 0.f) return false;
    x.row(n - 1) /= u(n - 1, 0);
    if (n > 1) x.row(n - 2) = (x.row(n - 2) - u(n - 2, 1) * x.row(n - 1)) / u(n - 2, 0);
    for (int64_t i = n - 3; i >= 0; --i)
      x.row(i) = (x.row(i) - u(i, 1) * x.row(i + 1) - u(i, 2) * x.row(i + 2)) / u(i, 0);
    return true;
  }

  template <class V>
  static bool Thomas(const V& sup, const V& diag, const V& sub, const ConstMatrixMap& rhs, MatrixMap& x) {
    const int64_t n = diag.size();
    Eigen::ArrayXf u(n);
    if (diag(0) == 0.f) return false;
    u(0) = sup(0) / diag(0);
    x.row(0) = rhs.row(0) / diag(0);
    for (int64_t i = 1; i < n; ++i) {
      const float denom = diag(i) - sub(i) * u(i - 1);
      if (denom == 0.f) return false;
      u(i) = sup(i) / denom;
      x.row(i) = (rhs.row(i) - sub(i) * x.row(i - 1)) / denom;
    }
    for (int64_t i = n - 2; i >= 0; --i) x.row(i) -= u(i) * x.row(i + 1);
    return true;
  }

  int64_t m_ = 0, k_ = 0;
  bool pivoting_ = true;
};

NPU_REGISTER_KERNEL("MatrixInverse", InverseKernel::Make);
NPU_REGISTER_KERNEL("MatrixSolve", SolveKernel::Make);
NPU_REGISTER_KERNEL("MatrixTriangularSolve", TriangularSolveKernel::Make);
NPU_REGISTER_KERNEL("MatrixDeterminant", [](const KernelDef& d, std::unique_ptr<Kernel>* k) {
  return DeterminantKernel::Make(d, false, k);
});
NPU_REGISTER_KERNEL("LogMatrixDeterminant", [](const KernelDef& d, std::unique_ptr<Kernel>* k) {
  return DeterminantKernel::Make(d, true, k);
});
NPU_REGISTER_KERNEL("Cholesky", CholeskyKernel::Make);
NPU_REGISTER_KERNEL("Qr", QrKernel::Make);
NPU_REGISTER_KERNEL("SelfAdjointEigV2", EigKernel::Make);
NPU_REGISTER_KERNEL("Svd", SvdKernel::Make);
NPU_REGISTER_KERNEL("MatrixSquareRoot", SquareRootKernel::Make);
NPU_REGISTER_KERNEL("CholeskyGrad", CholeskyGradKernel::Make);
NPU_REGISTER_KERNEL("Lu", LuKernel::Make);
NPU_REGISTER_KERNEL("BandedTriangularSolve", BandedSolveKernel::Make);
NPU_REGISTER_KERNEL("TridiagonalMatMul", TridiagonalMatMulKernel::Make);
NPU_REGISTER_KERNEL("TridiagonalSolve", TridiagonalSolveKernel::Make);

}  // namespace
}  // namespace kernels
}  // namespace npu
