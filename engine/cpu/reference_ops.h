// Double-precision reference forwards of the GPT ops, written as plainly as
// possible and independently of the backend (no blocking, no threads, no
// saved statistics). Tests compare the backend's fp32 forwards with them
// and its backwards with central finite differences of them. Header-only;
// pure functions.
#ifndef TRAINYARD_ENGINE_CPU_REFERENCE_OPS_H_
#define TRAINYARD_ENGINE_CPU_REFERENCE_OPS_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <vector>

namespace trainyard::engine::reference {

using Vec = std::vector<double>;

// d f / d x[i] for every i by central differences with step h, in double.
inline Vec FiniteDifferences(Vec x, const std::function<double(const Vec&)>& f,
                             double h = 1e-4) {
  Vec g(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double keep = x[i];
    x[i] = keep + h;
    const double up = f(x);
    x[i] = keep - h;
    const double down = f(x);
    x[i] = keep;
    g[i] = (up - down) / (2 * h);
  }
  return g;
}

// out[r, o] = sum_i x[r, i] w[o, i] + b[o]  (b may be empty).
inline Vec Linear(const Vec& x, const Vec& w, const Vec& b, int64_t rows,
                  int64_t in, int64_t out) {
  Vec y(rows * out);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t o = 0; o < out; ++o) {
      double s = b.empty() ? 0.0 : b[o];
      for (int64_t i = 0; i < in; ++i) s += x[r * in + i] * w[o * in + i];
      y[r * out + o] = s;
    }
  }
  return y;
}

inline Vec Embedding(const std::vector<int32_t>& tokens, const Vec& wte,
                     const Vec& wpe, int64_t batch, int64_t seq, int64_t c) {
  Vec y(batch * seq * c);
  for (int64_t r = 0; r < batch * seq; ++r) {
    for (int64_t k = 0; k < c; ++k) {
      y[r * c + k] = wte[tokens[r] * c + k] + wpe[(r % seq) * c + k];
    }
  }
  return y;
}

inline Vec LayerNorm(const Vec& x, const Vec& w, const Vec& b, int64_t rows,
                     int64_t c) {
  Vec y(rows * c);
  for (int64_t r = 0; r < rows; ++r) {
    const double* v = x.data() + r * c;
    double mean = 0, var = 0;
    for (int64_t k = 0; k < c; ++k) mean += v[k];
    mean /= c;
    for (int64_t k = 0; k < c; ++k) var += (v[k] - mean) * (v[k] - mean);
    var /= c;
    const double rstd = 1.0 / std::sqrt(var + 1e-5);
    for (int64_t k = 0; k < c; ++k) {
      y[r * c + k] = (v[k] - mean) * rstd * w[k] + b[k];
    }
  }
  return y;
}

inline Vec Gelu(const Vec& x) {
  Vec y(x.size());
  const double s = std::sqrt(2.0 / M_PI);
  for (size_t i = 0; i < x.size(); ++i) {
    const double v = x[i];
    y[i] = 0.5 * v * (1 + std::tanh(s * (v + 0.044715 * v * v * v)));
  }
  return y;
}

// qkv [B, T, 3C] -> out [B, T, C], causal, heads side by side.
inline Vec Attention(const Vec& qkv, int64_t batch, int64_t seq, int64_t c,
                     int64_t heads) {
  const int64_t hs = c / heads;
  const double scale = 1.0 / std::sqrt(static_cast<double>(hs));
  Vec out(batch * seq * c, 0.0);
  auto at = [&](int64_t b, int64_t t, int64_t part, int64_t h, int64_t i) {
    return qkv[(b * seq + t) * 3 * c + part * c + h * hs + i];
  };
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t h = 0; h < heads; ++h) {
      for (int64_t t = 0; t < seq; ++t) {
        Vec score(t + 1);
        double max = -1e300;
        for (int64_t j = 0; j <= t; ++j) {
          double s = 0;
          for (int64_t i = 0; i < hs; ++i)
            s += at(b, t, 0, h, i) * at(b, j, 1, h, i);
          score[j] = s * scale;
          max = std::max(max, score[j]);
        }
        double sum = 0;
        for (double& s : score) sum += (s = std::exp(s - max));
        for (int64_t j = 0; j <= t; ++j) {
          for (int64_t i = 0; i < hs; ++i) {
            out[(b * seq + t) * c + h * hs + i] +=
                score[j] / sum * at(b, j, 2, h, i);
          }
        }
      }
    }
  }
  return out;
}

// Sum over rows of -log softmax(logits[r])[targets[r]].
inline double CrossEntropySum(const Vec& logits,
                              const std::vector<int32_t>& targets, int64_t rows,
                              int64_t classes) {
  double total = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const double* x = logits.data() + r * classes;
    double max = x[0], sum = 0;
    for (int64_t k = 1; k < classes; ++k) max = std::max(max, x[k]);
    for (int64_t k = 0; k < classes; ++k) sum += std::exp(x[k] - max);
    total += std::log(sum) - (x[targets[r]] - max);
  }
  return total;
}

}  // namespace trainyard::engine::reference

#endif  // TRAINYARD_ENGINE_CPU_REFERENCE_OPS_H_
