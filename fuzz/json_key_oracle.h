// An oracle the JSON fuzz targets check their readers against: whether a JSON text holds an
// object with a key given twice, which every reader must refuse (core/json_reader.h). Written
// apart from the reader's check, as utf8_oracle.h is apart from data/: simdjson's On-Demand API
// here (the reader walks its DOM), and a std::set of each object's unescaped keys (the reader
// compares pairs or hashes views), so one bug is unlikely to hide in both.
#pragma once

#include <string_view>

namespace titan::fuzz {

// True when an object of `json` (a text a reader accepted, so valid JSON) holds a key twice.
bool json_holds_key_twice(std::string_view json);

}  // namespace titan::fuzz
