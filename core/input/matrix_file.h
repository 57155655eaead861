// Input files as people have them: one reader for every matrix and label
// file the CLI, the clients and the server's checks accept.
//
// Matrices (a data set, logits, embeddings, features):
//   * .npy of float16, float32, float64, any signed or unsigned integer type
//     or bool, either byte order, C or Fortran order. The file is mapped,
//     never read whole: rows are converted to float32 block by block, so a
//     Fortran-order or float64 file costs no second copy in memory. A 1-D
//     array is refused (a matrix has rows and columns).
//   * .npz (numpy.savez or savez_compressed): the array named by `key`, or
//     the only array when `key` is empty. The member is unpacked into an
//     unlinked temporary file (in $TMPDIR, else /tmp) and then read like a
//     .npy, so it takes disk, not memory.
//   * .csv and .tsv (comma- or tab-separated; .txt: either, whichever the
//     first line has): numbers only, one row per line, every row the same
//     width; a first line with any field that is not a number is a header
//     (its fields are kept as column names). Blank lines are skipped.
// Which reader applies is decided by the file's first bytes (the .npy magic,
// a zip signature) and otherwise by its extension.
//
// Every refusal is InvalidArgument (NotFound/PermissionDenied for a file
// that cannot be opened), names the file, says what is wrong and, where
// there is one, what to do. Values are not checked to be finite here: the
// caller decides (an upload names the first non-finite row and column).
#ifndef DENDRO_CORE_INPUT_MATRIX_FILE_H_
#define DENDRO_CORE_INPUT_MATRIX_FILE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace dendro {

struct InputFileOptions {
  // The array to read from a .npz archive; "" means its only array (an
  // archive with several is refused with the list of names).
  std::string npz_key;
};

// A 2-D numeric table, readable as float32 rows. Not thread-safe.
class MatrixFile {
 public:
  static absl::StatusOr<std::unique_ptr<MatrixFile>> Open(const std::string& path,
                                                          const InputFileOptions& options = {});
  virtual ~MatrixFile() = default;

  const std::string& path() const { return path_; }
  int64_t rows() const { return rows_; }
  int64_t cols() const { return cols_; }
  // What the file holds, for messages and progress: "float64 .npy",
  // "int32 .npy (Fortran order)", "float32 .npz member 'x'", "csv".
  const std::string& description() const { return description_; }
  // Column names from a CSV header; empty otherwise.
  const std::vector<std::string>& column_names() const { return column_names_; }

  // Rows [begin, end) as row-major float32, without copying, when the file
  // already holds exactly that; nullptr otherwise (then use ReadRows).
  // Requires 0 <= begin <= end <= rows().
  virtual const float* Float32Rows(int64_t begin, int64_t end) = 0;
  // Converts rows [begin, end) into out[0 .. (end-begin)*cols()), row-major.
  // Integers convert exactly up to 2^24 and round beyond; a finite float64
  // outside float32's range is an error naming its row and column.
  virtual absl::Status ReadRows(int64_t begin, int64_t end, float* out) = 0;
  // A hint for a reader going front to back: the rows before `row` are not
  // needed again soon, so their pages may be released. Reading them later
  // still works.
  virtual void ReleaseRowsBefore(int64_t row) { (void)row; }

 protected:
  MatrixFile() = default;
  std::string path_;
  int64_t rows_ = 0;
  int64_t cols_ = 0;
  std::string description_;
  std::vector<std::string> column_names_;
};

// Class labels, one per row, from any of:
//   * .npy/.npz of any integer type, bool, integer-valued floats, or
//     strings (unicode or bytes); 1-D, or 2-D with one column;
//   * .csv/.tsv/.txt with one label per line (an optional header line is
//     recognised when it is not a number and every other line is).
// Integers keep their values. Strings are mapped to 0 .. C-1 in sorted
// (byte-wise) order and their names kept: names[id] is the string of id.
// A float that is not a whole number, NaN, or an empty string is refused
// with its row.
struct LabelColumn {
  std::vector<int64_t> ids;
  std::vector<std::string> names;  // empty unless the labels were strings
};
absl::StatusOr<LabelColumn> ReadLabelFile(const std::string& path,
                                          const InputFileOptions& options = {});

// The same rules for label strings already in memory (e.g. a CSV column).
absl::StatusOr<LabelColumn> LabelsFromStrings(const std::vector<std::string>& values,
                                              const std::string& source);

}  // namespace dendro

#endif  // DENDRO_CORE_INPUT_MATRIX_FILE_H_
