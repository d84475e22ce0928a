// yaml-cpp's own cost for a configuration file, without any of sluice: what start-up cannot go
// below while sluice.yaml is read with yaml-cpp (BENCHMARKS.md, "Start-up with 150,000 static
// keys").
//
//   g++ -O2 -std=c++20 bench/yaml_floor.cc -lyaml-cpp -o /tmp/yaml_floor
//   /tmp/yaml_floor events FILE   # the parser's events only, no tree
//   /tmp/yaml_floor load FILE     # YAML::Load: yaml-cpp's own tree as well (sluice builds its
//                                 # own from the events instead)
#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <string_view>

namespace {

class Ignore : public YAML::EventHandler {
 public:
  void OnDocumentStart(const YAML::Mark&) override {}
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t,
                const std::string&) override {}
  void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                       YAML::EmitterStyle::value) override {}
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                  YAML::EmitterStyle::value) override {}
  void OnMapEnd() override {}
};

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: yaml_floor events|load FILE\n");
    return 64;
  }
  std::ifstream in(argv[2], std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  const std::string_view mode = argv[1];
  if (mode == "events") {
    std::istringstream stream(text.str());
    YAML::Parser parser(stream);
    Ignore ignore;
    while (parser.HandleNextDocument(ignore)) {
    }
  } else {
    const YAML::Node root = YAML::Load(text.str());
    std::printf("%zu top-level fields\n", root.size());
  }
  return 0;
}
