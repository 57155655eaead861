#include "core/io/npy.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/common/status_macros.h"
#include "core/io/atomic_file.h"
#include "core/io/posix_error.h"
#include "core/io/whole_read.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "dendro's .npy support assumes a little-endian host"
#endif

namespace dendro {
namespace {

using io_internal::OpenForReading;
using io_internal::PosixError;
using io_internal::ToAbsl;

constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicLen = 6;
constexpr size_t kAlign = 64;             // numpy's ARRAY_ALIGN
constexpr size_t kGrowthAxisDigits = 21;  // numpy's GROWTH_AXIS_MAX_DIGITS
constexpr int kMaxNesting = 32;

// ---------------------------------------------------------------------------
// A parser for the subset of Python literals that can occur in a .npy header:
// dicts, tuples, lists, strings, integers, True/False/None.

struct PyValue {
  enum class Kind { kString, kInt, kBool, kNone, kTuple, kList, kDict };
  Kind kind = Kind::kNone;
  std::string str;
  int64_t num = 0;
  bool flag = false;
  std::vector<PyValue> items;  // tuple/list elements; dict: key, value, ...
};

std::string Repr(const PyValue& v);

std::string ReprItems(const std::vector<PyValue>& items, size_t step, const char* sep) {
  std::string out;
  for (size_t i = 0; i < items.size(); i += step) {
    if (i > 0) out += ", ";
    out += Repr(items[i]);
    if (step == 2) absl::StrAppend(&out, sep, Repr(items[i + 1]));
  }
  return out;
}

std::string Repr(const PyValue& v) {
  switch (v.kind) {
    case PyValue::Kind::kString:
      return absl::StrCat("'", absl::CHexEscape(v.str), "'");
    case PyValue::Kind::kInt:
      return absl::StrCat(v.num);
    case PyValue::Kind::kBool:
      return v.flag ? "True" : "False";
    case PyValue::Kind::kNone:
      return "None";
    case PyValue::Kind::kTuple:
      return absl::StrCat("(", ReprItems(v.items, 1, ""), v.items.size() == 1 ? ",)" : ")");
    case PyValue::Kind::kList:
      return absl::StrCat("[", ReprItems(v.items, 1, ""), "]");
    case PyValue::Kind::kDict:
      return absl::StrCat("{", ReprItems(v.items, 2, ": "), "}");
  }
  return "?";
}

class LiteralParser {
 public:
  explicit LiteralParser(std::string_view text) : text_(text) {}

  // The whole text must be one literal, optionally surrounded by whitespace.
  absl::StatusOr<PyValue> ParseAll() {
    DENDRO_ASSIGN_OR_RETURN(PyValue v, ParseValue(0));
    SkipSpace();
    if (pos_ != text_.size()) return Error("unexpected text after the header dict");
    return v;
  }

 private:
  absl::Status Error(std::string_view what) const {
    constexpr size_t kMaxShown = 200;
    std::string_view shown = text_.substr(0, kMaxShown);
    return absl::InvalidArgumentError(absl::StrCat(
        "cannot parse header dict: ", ToAbsl(what), " at offset ", pos_, " in \"",
        absl::CHexEscape(ToAbsl(shown)), text_.size() > kMaxShown ? "...\"" : "\""));
  }

  bool AtEnd() const { return pos_ >= text_.size(); }
  char Peek() const { return AtEnd() ? '\0' : text_[pos_]; }

  void SkipSpace() {
    while (!AtEnd()) {
      const char c = text_[pos_];
      if (c != ' ' && c != '\t' && c != '\n' && c != '\r' && c != '\f' && c != '\v') break;
      ++pos_;
    }
  }

  bool ConsumeWord(std::string_view word) {
    if (text_.substr(pos_, word.size()) != word) return false;
    const size_t end = pos_ + word.size();
    if (end < text_.size()) {
      const char c = text_[end];
      if (std::isalnum(static_cast<unsigned char>(c)) || c == '_') return false;
    }
    pos_ = end;
    return true;
  }

  absl::StatusOr<PyValue> ParseValue(int depth) {
    if (depth > kMaxNesting) return Error("nesting too deep");
    SkipSpace();
    if (AtEnd()) return Error("unexpected end of header");
    const char c = Peek();
    if (c == '{') return ParseSequence(depth, '}', PyValue::Kind::kDict);
    if (c == '(') return ParseSequence(depth, ')', PyValue::Kind::kTuple);
    if (c == '[') return ParseSequence(depth, ']', PyValue::Kind::kList);
    if (c == '\'' || c == '"') return ParseString();
    if ((c == 'u' || c == 'b') && pos_ + 1 < text_.size() &&
        (text_[pos_ + 1] == '\'' || text_[pos_ + 1] == '"')) {
      ++pos_;
      return ParseString();
    }
    if (c == '-' || c == '+' || std::isdigit(static_cast<unsigned char>(c))) return ParseInt();
    PyValue v;
    if (ConsumeWord("True")) {
      v.kind = PyValue::Kind::kBool;
      v.flag = true;
      return v;
    }
    if (ConsumeWord("False")) {
      v.kind = PyValue::Kind::kBool;
      return v;
    }
    if (ConsumeWord("None")) return v;
    return Error("expected a Python literal");
  }

  absl::StatusOr<PyValue> ParseString() {
    const char quote = text_[pos_++];
    PyValue v;
    v.kind = PyValue::Kind::kString;
    while (true) {
      if (AtEnd()) return Error("unterminated string");
      char c = text_[pos_++];
      if (c == quote) break;
      if (c == '\n') return Error("newline in string");
      if (c == '\\') {
        if (AtEnd()) return Error("unterminated string");
        c = text_[pos_++];
        switch (c) {
          case 'n': c = '\n'; break;
          case 't': c = '\t'; break;
          case 'r': c = '\r'; break;
          case '0': c = '\0'; break;
          default: break;  // \\, \', \" and anything else: the character.
        }
      }
      v.str.push_back(c);
    }
    return v;
  }

  absl::StatusOr<PyValue> ParseInt() {
    const size_t start = pos_;
    bool negative = false;
    if (Peek() == '-' || Peek() == '+') negative = text_[pos_++] == '-';
    if (!std::isdigit(static_cast<unsigned char>(Peek()))) return Error("expected a digit");
    uint64_t magnitude = 0;
    const uint64_t limit = uint64_t{std::numeric_limits<int64_t>::max()} + (negative ? 1 : 0);
    while (std::isdigit(static_cast<unsigned char>(Peek()))) {
      const uint64_t digit = static_cast<uint64_t>(text_[pos_++] - '0');
      if (magnitude > (limit - digit) / 10) {
        pos_ = start;
        return Error("integer out of range");
      }
      magnitude = magnitude * 10 + digit;
    }
    if (Peek() == 'L' || Peek() == 'l') ++pos_;  // Python 2 long suffix.
    if (std::isalpha(static_cast<unsigned char>(Peek())) || Peek() == '.' || Peek() == '_') {
      return Error("expected an integer");
    }
    PyValue v;
    v.kind = PyValue::Kind::kInt;
    v.num = negative ? static_cast<int64_t>(0 - magnitude) : static_cast<int64_t>(magnitude);
    return v;
  }

  // {k: v, ...}, (a, b, ...), [a, b, ...]; trailing commas allowed. A
  // parenthesised single value without a comma is that value, as in Python.
  absl::StatusOr<PyValue> ParseSequence(int depth, char close, PyValue::Kind kind) {
    ++pos_;
    PyValue v;
    v.kind = kind;
    bool saw_comma = false;
    while (true) {
      SkipSpace();
      if (Peek() == close) {
        ++pos_;
        break;
      }
      if (!v.items.empty() && !saw_comma) {
        return Error(absl::StrCat("expected ',' or '", std::string(1, close), "'"));
      }
      DENDRO_ASSIGN_OR_RETURN(PyValue item, ParseValue(depth + 1));
      v.items.push_back(std::move(item));
      if (kind == PyValue::Kind::kDict) {
        SkipSpace();
        if (Peek() != ':') return Error("expected ':' after a dict key");
        ++pos_;
        DENDRO_ASSIGN_OR_RETURN(PyValue value, ParseValue(depth + 1));
        v.items.push_back(std::move(value));
      }
      SkipSpace();
      saw_comma = Peek() == ',';
      if (saw_comma) ++pos_;
    }
    if (kind == PyValue::Kind::kTuple && v.items.size() == 1 && !saw_comma) {
      return std::move(v.items[0]);
    }
    return v;
  }

  std::string_view text_;
  size_t pos_ = 0;
};

// ---------------------------------------------------------------------------

std::string ShapeRepr(absl::Span<const int64_t> shape) {
  if (shape.size() == 1) return absl::StrCat("(", shape[0], ",)");
  return absl::StrCat("(", absl::StrJoin(shape, ", "), ")");
}

std::string_view DescrOf(DType t) {
  switch (t) {
    case DType::kFloat32: return "<f4";
    case DType::kFloat64: return "<f8";
    case DType::kInt32: return "<i4";
    case DType::kInt64: return "<i8";
  }
  return "?";
}

// numpy's name for a type code without byte order ("f2" -> "float16").
std::string_view NumpyTypeName(std::string_view code) {
  static constexpr std::pair<std::string_view, std::string_view> kNames[] = {
      {"f2", "float16"},   {"f4", "float32"},    {"f8", "float64"},     {"f16", "float128"},
      {"i1", "int8"},      {"i2", "int16"},      {"i4", "int32"},       {"i8", "int64"},
      {"u1", "uint8"},     {"u2", "uint16"},     {"u4", "uint32"},      {"u8", "uint64"},
      {"b1", "bool"},      {"c8", "complex64"},  {"c16", "complex128"}, {"c32", "complex256"},
      {"O", "object"},     {"O8", "object"},     {"?", "bool"},
  };
  for (const auto& [c, name] : kNames) {
    if (c == code) return name;
  }
  if (!code.empty() && code[0] == 'U') return "unicode string";
  if (!code.empty() && code[0] == 'S') return "byte string";
  if (!code.empty() && code[0] == 'V') return "void/raw bytes";
  if (!code.empty() && code[0] == 'M') return "datetime64";
  if (!code.empty() && code[0] == 'm') return "timedelta64";
  return "";
}

absl::StatusOr<NpyElementType> ParseElementType(const PyValue& descr) {
  if (descr.kind == PyValue::Kind::kList) {
    return absl::InvalidArgumentError(absl::StrCat(
        "structured dtype ", Repr(descr),
        " is not supported; save a plain numeric array (one dtype for every column)"));
  }
  if (descr.kind != PyValue::Kind::kString) {
    return absl::InvalidArgumentError(
        absl::StrCat("'descr' must be a dtype string, got ", Repr(descr)));
  }
  const std::string& d = descr.str;
  const char order = d.empty() ? '\0' : d[0];
  const bool has_order = order == '<' || order == '>' || order == '|' || order == '=';
  const std::string_view code = has_order ? std::string_view(d).substr(1) : std::string_view(d);
  NpyElementType t;
  t.descr = d;
  t.big_endian = order == '>';
  const char letter = code.empty() ? '\0' : code[0];
  int64_t width = -1;
  if (code.size() > 1) {
    width = 0;
    for (char c : code.substr(1)) {
      if (!std::isdigit(static_cast<unsigned char>(c)) || width > 1000000) {
        width = -1;
        break;
      }
      width = width * 10 + (c - '0');
    }
  }
  bool ok = false;
  switch (letter) {
    case 'f':
      t.kind = NpyElementType::Kind::kFloat;
      ok = width == 2 || width == 4 || width == 8;
      break;
    case 'i':
      t.kind = NpyElementType::Kind::kSignedInt;
      ok = width == 1 || width == 2 || width == 4 || width == 8;
      break;
    case 'u':
      t.kind = NpyElementType::Kind::kUnsignedInt;
      ok = width == 1 || width == 2 || width == 4 || width == 8;
      break;
    case 'b':
      t.kind = NpyElementType::Kind::kBool;
      ok = width == 1;
      break;
    case '?':
      t.kind = NpyElementType::Kind::kBool;
      ok = code.size() == 1;
      width = 1;
      break;
    case 'U':
      t.kind = NpyElementType::Kind::kUnicode;
      ok = width >= 1;
      width *= 4;
      break;
    case 'S':
      t.kind = NpyElementType::Kind::kBytes;
      ok = width >= 1;
      break;
    default:
      break;
  }
  if (ok) {
    t.size = static_cast<int>(width);
    if (t.size == 1 || t.kind == NpyElementType::Kind::kBytes) t.big_endian = false;
    return t;
  }
  if (code == "O" || code == "O8") {
    return absl::InvalidArgumentError(absl::StrCat(
        "object arrays (dtype '", d,
        "') are not supported; convert to a numeric dtype, e.g. arr.astype('float32')"));
  }
  std::string name(NumpyTypeName(code));
  return absl::InvalidArgumentError(absl::StrCat(
      "unsupported dtype '", absl::CHexEscape(d), "'", name.empty() ? "" : " (", name,
      name.empty() ? "" : ")",
      "; Dendro reads floats, integers and booleans (and strings for labels)"));
}

// The strict subset the server stores: little-endian float32/64, int32/64.
absl::StatusOr<DType> StrictDType(const NpyElementType& t) {
  std::optional<DType> type;
  if (t.kind == NpyElementType::Kind::kFloat && t.size == 4) type = DType::kFloat32;
  if (t.kind == NpyElementType::Kind::kFloat && t.size == 8) type = DType::kFloat64;
  if (t.kind == NpyElementType::Kind::kSignedInt && t.size == 4) type = DType::kInt32;
  if (t.kind == NpyElementType::Kind::kSignedInt && t.size == 8) type = DType::kInt64;
  if (type.has_value() && !t.big_endian) return *type;
  if (type.has_value()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "big-endian dtype '", t.descr, "' is not supported; convert with arr.astype('<",
        t.descr.substr(1), "')"));
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unsupported dtype '", absl::CHexEscape(t.descr), "' (", t.Name(),
      "); Dendro reads float32, float64, int32 and int64 ('<f4', '<f8', '<i4', '<i8')"));
}

absl::StatusOr<std::vector<int64_t>> ParseShape(const PyValue& shape) {
  if (shape.kind != PyValue::Kind::kTuple) {
    return absl::InvalidArgumentError(
        absl::StrCat("'shape' must be a tuple of integers, got ", Repr(shape)));
  }
  std::vector<int64_t> dims;
  for (const PyValue& d : shape.items) {
    if (d.kind != PyValue::Kind::kInt) {
      return absl::InvalidArgumentError(
          absl::StrCat("'shape' must be a tuple of integers, got ", Repr(shape)));
    }
    dims.push_back(d.num);
  }
  if (dims.empty()) {
    return absl::InvalidArgumentError(
        "expected a 1-D or 2-D array, got a 0-d (scalar) array with shape ()");
  }
  if (dims.size() > 2) {
    return absl::InvalidArgumentError(absl::StrCat("expected a 1-D or 2-D array, got ",
                                                   dims.size(), "-D shape ", Repr(shape)));
  }
  for (int64_t d : dims) {
    if (d < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("invalid shape ", Repr(shape), ": negative dimension"));
    }
  }
  return dims;
}

// Element count and byte size of `shape`, or an error on overflow.
absl::Status CheckSize(absl::Span<const int64_t> shape, size_t elem_size) {
  int64_t bytes = static_cast<int64_t>(elem_size);
  for (int64_t d : shape) {
    if (__builtin_mul_overflow(bytes, d, &bytes)) {
      return absl::InvalidArgumentError(
          absl::StrCat("shape ", ShapeRepr(shape), " is too large to address"));
    }
  }
  return absl::OkStatus();
}

uint32_t LoadLE(const char* p, size_t n) {
  uint32_t v = 0;
  for (size_t i = 0; i < n; ++i) v |= uint32_t{static_cast<unsigned char>(p[i])} << (8 * i);
  return v;
}

// "1000 x 10 float32 (40000 bytes)".
std::string DescribeArray(const NpyHeader& h) {
  return absl::StrCat(absl::StrJoin(h.shape, " x "), " ", ToAbsl(DTypeName(h.dtype)), " (",
                      h.num_bytes(), " bytes)");
}

absl::Status WithPath(const std::string& path, const absl::Status& s) {
  return absl::Status(s.code(), absl::StrCat(path, ": ", s.message()));
}

bool IsFloat(DType t) { return t == DType::kFloat32 || t == DType::kFloat64; }

template <typename T>
absl::Status WriteNpyImpl(const std::string& path, DType dtype, absl::Span<const T> data,
                          absl::Span<const int64_t> shape) {
  if (shape.empty() || shape.size() > 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": WriteNpy: expected a 1-D or 2-D shape, got ", ShapeRepr(shape)));
  }
  for (int64_t d : shape) {
    if (d < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": WriteNpy: negative dimension in shape ", ShapeRepr(shape)));
    }
  }
  if (absl::Status s = CheckSize(shape, sizeof(T)); !s.ok()) return WithPath(path, s);
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  if (static_cast<uint64_t>(n) != data.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": WriteNpy: shape ", ShapeRepr(shape), " has ", n,
                     " elements but the data has ", data.size()));
  }
  AtomicFileWriter writer;
  DENDRO_RETURN_IF_ERROR(AtomicFileWriter::Open(path, &writer));
  DENDRO_RETURN_IF_ERROR(writer.Append(MakeNpyHeader(dtype, shape)));
  DENDRO_RETURN_IF_ERROR(writer.Append(
      std::string_view(reinterpret_cast<const char*>(data.data()), data.size() * sizeof(T))));
  return writer.Commit();
}

template <typename Out, typename In>
void Convert(const void* src, int64_t n, std::vector<Out>* out) {
  const In* in = static_cast<const In*>(src);
  out->resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) (*out)[i] = static_cast<Out>(in[i]);
}

}  // namespace

std::string_view DTypeName(DType t) {
  switch (t) {
    case DType::kFloat32: return "float32";
    case DType::kFloat64: return "float64";
    case DType::kInt32: return "int32";
    case DType::kInt64: return "int64";
  }
  return "unknown";
}

size_t DTypeSize(DType t) {
  switch (t) {
    case DType::kFloat32: return 4;
    case DType::kFloat64: return 8;
    case DType::kInt32: return 4;
    case DType::kInt64: return 8;
  }
  return 0;
}

int64_t NpyHeader::num_elements() const {
  if (shape.empty()) return 0;
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

int64_t NpyHeader::num_bytes() const {
  return num_elements() * static_cast<int64_t>(DTypeSize(dtype));
}

std::string NpyElementType::Name() const {
  switch (kind) {
    case Kind::kFloat: return absl::StrCat("float", 8 * size);
    case Kind::kSignedInt: return absl::StrCat("int", 8 * size);
    case Kind::kUnsignedInt: return absl::StrCat("uint", 8 * size);
    case Kind::kBool: return "bool";
    case Kind::kUnicode: return absl::StrCat("<U", size / 4, " (unicode string)");
    case Kind::kBytes: return absl::StrCat("|S", size, " (byte string)");
  }
  return "unknown";
}

int64_t NpyLayout::num_elements() const {
  if (shape.empty()) return 0;
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

int64_t NpyLayout::num_bytes() const { return num_elements() * element.size; }

absl::StatusOr<NpyLayout> ParseNpyLayout(std::string_view bytes) {
  const std::string_view magic = bytes.substr(0, kMagicLen);
  if (magic != std::string_view(kMagic, kMagicLen).substr(0, magic.size()) ||
      magic.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "not a .npy file: expected magic \"\\x93NUMPY\", got \"",
        absl::CHexEscape(ToAbsl(magic)), "\""));
  }
  if (bytes.size() < kMagicLen + 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("truncated header: only ", bytes.size(), " bytes"));
  }
  const int major = static_cast<unsigned char>(bytes[6]);
  const int minor = static_cast<unsigned char>(bytes[7]);
  if (minor != 0 || major < 1 || major > 3) {
    return absl::InvalidArgumentError(absl::StrCat("unsupported .npy format version ", major,
                                                   ".", minor, " (supported: 1.0, 2.0, 3.0)"));
  }
  const size_t len_size = major == 1 ? 2 : 4;
  const size_t prefix = kMagicLen + 2 + len_size;
  if (bytes.size() < prefix) {
    return absl::InvalidArgumentError(
        absl::StrCat("truncated header: only ", bytes.size(), " bytes"));
  }
  const size_t header_len = LoadLE(bytes.data() + kMagicLen + 2, len_size);
  if (bytes.size() - prefix < header_len) {
    return absl::InvalidArgumentError(
        absl::StrCat("truncated header: the header is ", header_len, " bytes but only ",
                     bytes.size() - prefix, " follow the length field"));
  }
  DENDRO_ASSIGN_OR_RETURN(PyValue dict,
                          LiteralParser(bytes.substr(prefix, header_len)).ParseAll());
  if (dict.kind != PyValue::Kind::kDict) {
    return absl::InvalidArgumentError(
        absl::StrCat("header is not a dict: ", Repr(dict)));
  }
  const PyValue* descr = nullptr;
  const PyValue* fortran = nullptr;
  const PyValue* shape = nullptr;
  for (size_t i = 0; i < dict.items.size(); i += 2) {
    const PyValue& key = dict.items[i];
    const PyValue** slot = nullptr;
    if (key.kind == PyValue::Kind::kString) {
      if (key.str == "descr") slot = &descr;
      if (key.str == "fortran_order") slot = &fortran;
      if (key.str == "shape") slot = &shape;
    }
    if (slot == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          "unexpected key ", Repr(key),
          " in header (expected 'descr', 'fortran_order' and 'shape')"));
    }
    if (*slot != nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("duplicate key ", Repr(key), " in header"));
    }
    *slot = &dict.items[i + 1];
  }
  for (auto [value, name] : {std::pair{descr, "descr"}, std::pair{fortran, "fortran_order"},
                             std::pair{shape, "shape"}}) {
    if (value == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("header has no '", name, "' key"));
    }
  }
  NpyLayout layout;
  DENDRO_ASSIGN_OR_RETURN(layout.element, ParseElementType(*descr));
  if (fortran->kind != PyValue::Kind::kBool) {
    return absl::InvalidArgumentError(
        absl::StrCat("'fortran_order' must be True or False, got ", Repr(*fortran)));
  }
  layout.fortran_order = fortran->flag;
  DENDRO_ASSIGN_OR_RETURN(layout.shape, ParseShape(*shape));
  DENDRO_RETURN_IF_ERROR(CheckSize(layout.shape, static_cast<size_t>(layout.element.size)));
  layout.data_offset = prefix + header_len;
  return layout;
}

absl::StatusOr<NpyHeader> ParseNpyHeader(std::string_view bytes) {
  DENDRO_ASSIGN_OR_RETURN(NpyLayout layout, ParseNpyLayout(bytes));
  NpyHeader header;
  DENDRO_ASSIGN_OR_RETURN(header.dtype, StrictDType(layout.element));
  if (layout.fortran_order) {
    return absl::InvalidArgumentError(
        "Fortran-order (column-major) arrays are not supported; save a C-order copy, "
        "e.g. np.save(path, np.ascontiguousarray(arr))");
  }
  header.shape = std::move(layout.shape);
  header.data_offset = layout.data_offset;
  return header;
}

std::string MakeNpyHeader(DType dtype, absl::Span<const int64_t> shape) {
  // Same text, order and padding as numpy.lib.format._write_array_header.
  std::string dict = absl::StrCat("{'descr': '", ToAbsl(DescrOf(dtype)),
                                  "', 'fortran_order': False, 'shape': ", ShapeRepr(shape),
                                  ", }");
  if (!shape.empty()) {
    const size_t digits = absl::StrCat(shape[0]).size();
    if (digits < kGrowthAxisDigits) dict.append(kGrowthAxisDigits - digits, ' ');
  }
  const size_t hlen = dict.size() + 1;  // + '\n'
  size_t len_size = 2;
  size_t pad = kAlign - (kMagicLen + 2 + len_size + hlen) % kAlign;
  if (hlen + pad > 0xffff) {
    len_size = 4;
    pad = kAlign - (kMagicLen + 2 + len_size + hlen) % kAlign;
  }
  const uint32_t total = static_cast<uint32_t>(hlen + pad);
  std::string out(kMagic, kMagicLen);
  out.push_back(static_cast<char>(len_size == 2 ? 1 : 2));
  out.push_back(0);
  for (size_t i = 0; i < len_size; ++i) out.push_back(static_cast<char>((total >> (8 * i)) & 0xff));
  out += dict;
  out.append(pad, ' ');
  out.push_back('\n');
  return out;
}

// ---------------------------------------------------------------------------

absl::StatusOr<std::unique_ptr<MappedNpy>> MappedNpy::Open(const std::string& path, Pages pages) {
  struct stat st;
  DENDRO_ASSIGN_OR_RETURN(const int fd, OpenForReading(path, &st));
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return absl::InvalidArgumentError(absl::StrCat(
        path, S_ISDIR(st.st_mode) ? ": is a directory" : ": is not a regular file",
        ", not a .npy file"));
  }
  if (st.st_size == 0) {
    ::close(fd);
    return absl::InvalidArgumentError(absl::StrCat(path, ": empty file, not a .npy file"));
  }
  const size_t size = static_cast<size_t>(st.st_size);
  const int extra = pages == Pages::kWholeRead ? WholeReadMapFlags(size) : 0;
  void* map = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE | extra, fd, 0);
  const int map_err = errno;
  ::close(fd);
  if (map == MAP_FAILED) return PosixError(path, "mmap", map_err);

  std::unique_ptr<MappedNpy> npy(new MappedNpy());
  npy->path_ = path;
  npy->map_ = map;
  npy->map_size_ = size;
  const char* base = static_cast<const char*>(map);
  absl::StatusOr<NpyHeader> header = ParseNpyHeader(std::string_view(base, size));
  if (!header.ok()) return WithPath(path, header.status());
  npy->header_ = *std::move(header);
  const NpyHeader& h = npy->header_;
  const size_t data_bytes = size - h.data_offset;
  const size_t expected = static_cast<size_t>(h.num_bytes());
  if (data_bytes < expected) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": truncated: header says ", DescribeArray(h), " but only ",
                     data_bytes, " data bytes present"));
  }
  if (data_bytes > expected) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": corrupt: header says ", DescribeArray(h), " but ", data_bytes,
        " data bytes present (", data_bytes - expected, " trailing bytes)"));
  }
  const char* data = base + h.data_offset;
  if (expected > 0 && h.data_offset % DTypeSize(h.dtype) != 0) {
    // Give typed access an aligned copy.
    void* copy = ::mmap(nullptr, expected, PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (copy == MAP_FAILED) return PosixError(path, "mmap (aligned copy)", errno);
    std::memcpy(copy, data, expected);
    ::munmap(npy->map_, npy->map_size_);
    npy->map_ = copy;
    npy->map_size_ = expected;
    npy->file_backed_ = false;  // dropping its pages would lose them
    data = static_cast<const char*>(copy);
  }
  npy->data_ = data;
  return npy;
}

MappedNpy::~MappedNpy() {
  if (map_ != nullptr) ::munmap(map_, map_size_);
}

void MappedNpy::DropPagesBefore(const void* end) {
  if (!file_backed_ || map_ == nullptr) return;
  const char* base = static_cast<const char*>(map_);
  const auto* stop = static_cast<const char*>(end);
  if (stop <= base) return;
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  const size_t limit = std::min(static_cast<size_t>(stop - base), map_size_) / page * page;
  if (limit <= dropped_) return;
  // The mapping is private and read-only, so no page holds a change: a
  // dropped page is read again from the file if it is touched.
  ::madvise(static_cast<char*>(map_) + dropped_, limit - dropped_, MADV_DONTNEED);
  dropped_ = limit;
}

absl::StatusOr<absl::Span<const float>> MappedNpy::AsFloat32() const {
  if (header_.dtype != DType::kFloat32) {
    return absl::FailedPreconditionError(
        absl::StrCat(path_, ": expected a float32 array, got ",
                     ToAbsl(DTypeName(header_.dtype))));
  }
  return absl::Span<const float>(static_cast<const float*>(data_),
                                 static_cast<size_t>(header_.num_elements()));
}

absl::StatusOr<NpyArrayF32> ToFloat32(const MappedNpy& npy) {
  const NpyHeader& h = npy.header();
  if (!IsFloat(h.dtype)) {
    return absl::InvalidArgumentError(absl::StrCat(
        npy.path(), ": expected a float32 or float64 array, got ", ToAbsl(DTypeName(h.dtype))));
  }
  NpyArrayF32 out;
  out.shape = h.shape;
  const int64_t n = h.num_elements();
  if (h.dtype == DType::kFloat32) {
    Convert<float, float>(npy.data(), n, &out.data);
    return out;
  }
  Convert<float, double>(npy.data(), n, &out.data);
  const double* in = static_cast<const double*>(npy.data());
  for (int64_t i = 0; i < n; ++i) {
    if (!std::isfinite(out.data[i]) && std::isfinite(in[i])) {
      const int64_t cols = h.cols();
      return absl::InvalidArgumentError(absl::StrCat(
          npy.path(), ": value ", in[i], " at row ", i / cols, ", column ", i % cols,
          " is outside the float32 range"));
    }
  }
  return out;
}

absl::StatusOr<NpyArrayF64> ToFloat64(const MappedNpy& npy) {
  const NpyHeader& h = npy.header();
  if (!IsFloat(h.dtype)) {
    return absl::InvalidArgumentError(absl::StrCat(
        npy.path(), ": expected a float32 or float64 array, got ", ToAbsl(DTypeName(h.dtype))));
  }
  NpyArrayF64 out;
  out.shape = h.shape;
  if (h.dtype == DType::kFloat32) {
    Convert<double, float>(npy.data(), h.num_elements(), &out.data);
  } else {
    Convert<double, double>(npy.data(), h.num_elements(), &out.data);
  }
  return out;
}

absl::StatusOr<NpyArrayI64> ToInt64(const MappedNpy& npy) {
  const NpyHeader& h = npy.header();
  if (IsFloat(h.dtype)) {
    return absl::InvalidArgumentError(absl::StrCat(
        npy.path(), ": expected an int32 or int64 array, got ", ToAbsl(DTypeName(h.dtype))));
  }
  NpyArrayI64 out;
  out.shape = h.shape;
  if (h.dtype == DType::kInt32) {
    Convert<int64_t, int32_t>(npy.data(), h.num_elements(), &out.data);
  } else {
    Convert<int64_t, int64_t>(npy.data(), h.num_elements(), &out.data);
  }
  return out;
}

absl::StatusOr<NpyArrayF32> ReadNpyFloat32(const std::string& path) {
  DENDRO_ASSIGN_OR_RETURN(std::unique_ptr<MappedNpy> npy, MappedNpy::Open(path));
  return ToFloat32(*npy);
}

absl::StatusOr<NpyArrayF64> ReadNpyFloat64(const std::string& path) {
  DENDRO_ASSIGN_OR_RETURN(std::unique_ptr<MappedNpy> npy, MappedNpy::Open(path));
  return ToFloat64(*npy);
}

absl::StatusOr<NpyArrayI64> ReadNpyInt(const std::string& path) {
  DENDRO_ASSIGN_OR_RETURN(std::unique_ptr<MappedNpy> npy, MappedNpy::Open(path));
  return ToInt64(*npy);
}

absl::Status WriteNpy(const std::string& path, absl::Span<const float> data,
                      absl::Span<const int64_t> shape) {
  return WriteNpyImpl(path, DType::kFloat32, data, shape);
}
absl::Status WriteNpy(const std::string& path, absl::Span<const double> data,
                      absl::Span<const int64_t> shape) {
  return WriteNpyImpl(path, DType::kFloat64, data, shape);
}
absl::Status WriteNpy(const std::string& path, absl::Span<const int32_t> data,
                      absl::Span<const int64_t> shape) {
  return WriteNpyImpl(path, DType::kInt32, data, shape);
}
absl::Status WriteNpy(const std::string& path, absl::Span<const int64_t> data,
                      absl::Span<const int64_t> shape) {
  return WriteNpyImpl(path, DType::kInt64, data, shape);
}

}  // namespace dendro
