#pragma once
// The job's page's style sheet and script (agent/status/page/page.css, page.js), compiled into ctrun by
// cmake/embed_text.cmake: the page needs nothing from the network.

#include <string_view>

namespace ctrun::agent::status {

std::string_view page_css();
std::string_view page_js();

}  // namespace ctrun::agent::status
