// ctrl export hf / ctrl import hf: Hugging Face CTRLLMHeadModel directories.
#include <cstdio>
#include <cstdlib>

#include "cli/args.h"
#include "cli/command.h"
#include "core/error.h"
#include "core/file_io.h"
#include "core/parse.h"
#include "io/hf.h"
#include "train/checkpoint.h"

namespace ctrl::cli {
namespace {

const char* kExportUsage =
    "usage: ctrl export hf --model CKPT --out DIR\n\n"
    "Writes DIR/config.json and DIR/model.safetensors, loadable with transformers'\n"
    "CTRLLMHeadModel.from_pretrained(DIR). The control codes go into config.json as \"control_codes\",\n"
    "and the checkpoint's SentencePiece model (if it has one) to DIR/tokenizer.model, its </s> as\n"
    "\"eos_token_id\". That tokenizer does not clean text as ctrl does (NFKC, spaces, controls) nor add\n"
    "the control code: tools/hf_prompt.py makes a prompt's ids as ctrl does (docs/training.md).\n"
    "Shared layers (model.sharing) are written unrolled; a factorized embedding cannot be exported.\n";
const char* kImportUsage =
    "usage: ctrl import hf --in DIR --out CKPT [--control NAME=ID]... [--tokenizer FILE.model]\n\n"
    "Reads a CTRLLMHeadModel directory (config.json + model.safetensors or its shards with\n"
    "model.safetensors.index.json, e.g. written by transformers' save_pretrained or by ctrl export hf)\n"
    "into a new ctrl checkpoint (CKPT must not exist), with no optimizer state. The tokenizer is\n"
    "--tokenizer, else DIR/tokenizer.model if there is one (as ctrl export hf writes it).\n";

// The format word after export/import: "hf" is the only one ctrl writes and reads.
void require_hf_format(const std::vector<std::string>& argv, const std::string& usage) {
  if (argv.empty() || argv[0].rfind("--", 0) == 0)
    fail("ctrl " + usage.substr(0, usage.find(' ')) + ": expected a format: ctrl " + usage);
  if (argv[0] != "hf")
    fail("ctrl " + usage.substr(0, usage.find(' ')) + ": unknown format '" + argv[0] +
         "' (ctrl knows hf, Hugging Face's CTRLLMHeadModel: ctrl " + usage + ")");
}

int export_cmd(const std::vector<std::string>& argv) {
  if (!argv.empty() && (argv[0] == "--help" || argv[0] == "-h")) return std::printf("%s", kExportUsage), 0;
  require_hf_format(argv, "export hf --model CKPT --out DIR");
  Args args("export hf", kExportUsage);
  args.flag("model");
  args.flag("out");
  if (!args.parse({argv.begin() + 1, argv.end()})) return 0;
  export_hf(model_checkpoint(args.require("model")), args.require("out"));
  const std::string out = args.get("out");
  std::fprintf(stderr, "wrote %s/config.json and %s/model.safetensors%s\n", out.c_str(), out.c_str(),
               file_exists(out + "/tokenizer.model") ? (" and " + out + "/tokenizer.model").c_str() : "");
  return 0;
}

int import_cmd(const std::vector<std::string>& argv) {
  if (!argv.empty() && (argv[0] == "--help" || argv[0] == "-h")) return std::printf("%s", kImportUsage), 0;
  require_hf_format(argv, "import hf --in DIR --out CKPT");
  Args args("import hf", kImportUsage);
  args.flag("in");
  args.flag("out");
  args.flag("tokenizer");
  args.repeated("control");
  if (!args.parse({argv.begin() + 1, argv.end()})) return 0;
  std::vector<CodeInfo> codes;
  for (const auto& spec : args.all("control")) {
    // The id must be a token id (int32, and below the model's vocabulary: import_hf checks that).
    const auto eq = spec.find('=');
    const int64_t id = eq == std::string::npos ? -1 : parse_whole_int(spec.substr(eq + 1)).value_or(-1);
    if (eq == std::string::npos || eq == 0 || id < 0 || id > 2147483647)
      fail("ctrl import hf: --control " + spec + ": expected NAME=TOKEN_ID with TOKEN_ID in [0, 2147483647]");
    codes.push_back({spec.substr(0, eq), int32_t(id)});
  }
  import_hf(args.require("in"), args.require("out"), codes, args.get("tokenizer"));
  std::fprintf(stderr, "wrote %s\n", args.get("out").c_str());
  return 0;
}

CommandRegistration export_registration({"export", "export a checkpoint (ctrl export hf: Hugging Face format)",
                                         export_cmd});
CommandRegistration import_registration({"import", "import a model (ctrl import hf: Hugging Face format)",
                                         import_cmd});

}  // namespace
}  // namespace ctrl::cli
