// SPDX-License-Identifier: Apache-2.0
// Implementation of include/sluice/s3/xml.hpp, continued: the bodies of ACLs (Get/Put of
// ?acl) and of GetObjectAttributes. Included by src/s3/s3.cpp after xml.ipp, whose helpers
// (load_root, for_each_element, take_once, body_writer, checksum_element) it uses.

namespace sluice::s3::xml {

access_control_policy parse_access_control_policy(std::string_view body, error_code& ec) {
  ec = errc::malformed_xml;
  pugi::xml_document doc;
  const pugi::xml_node root = load_root(doc, body, "AccessControlPolicy");
  if (!root) return {};
  access_control_policy policy;
  std::optional<std::string> owner_id;
  bool have_list = false;
  const auto read_grant = [&](const pugi::xml_node& grant) {
    if (std::string_view(grant.name()) != "Grant" || policy.grants.size() == max_acl_grants) return false;
    acl_grant g;
    std::optional<std::string> permission;
    bool have_grantee = false;
    const bool ok = for_each_element(grant, [&](const pugi::xml_node& field) {
      const std::string_view name = field.name();
      if (name == "Permission") return take_once(permission, field);
      if (name != "Grantee" || have_grantee) return false;
      have_grantee = true;
      // xsi:type="CanonicalUser" | "Group" | "AmazonCustomerByEmail", under any prefix.
      for (const pugi::xml_attribute& attribute : field.attributes()) {
        const std::string_view attribute_name = attribute.name();
        if (attribute_name == "type" || attribute_name.ends_with(":type")) g.type = attribute.value();
      }
      std::optional<std::string> id;
      std::optional<std::string> uri;
      std::optional<std::string> email;
      std::optional<std::string> display_name;
      const bool grantee_ok = for_each_element(field, [&](const pugi::xml_node& item) {
        const std::string_view item_name = item.name();
        if (item_name == "ID") return take_once(id, item);
        if (item_name == "URI") return take_once(uri, item);
        if (item_name == "EmailAddress") return take_once(email, item);
        if (item_name == "DisplayName") return take_once(display_name, item);
        return false;
      });
      g.id = id.value_or("");
      g.uri = uri.value_or("");
      g.email = email.value_or("");
      return grantee_ok;
    });
    if (!ok || !have_grantee || !permission) return false;
    g.permission = std::string(trim_xml_space(*permission));
    policy.grants.push_back(std::move(g));
    return true;
  };
  const bool ok = for_each_element(root, [&](const pugi::xml_node& child) {
    const std::string_view name = child.name();
    if (name == "Owner") {
      if (owner_id) return false;
      owner_id.emplace();
      return for_each_element(child, [&](const pugi::xml_node& item) {
        const std::string_view item_name = item.name();
        if (item_name == "ID") {
          std::optional<std::string> id;
          if (!take_once(id, item)) return false;
          *owner_id = std::move(*id);
          return true;
        }
        return item_name == "DisplayName";
      });
    }
    if (name != "AccessControlList" || have_list) return false;
    have_list = true;
    return for_each_element(child, read_grant);
  });
  if (!ok || !have_list) return {};
  policy.owner_id = owner_id.value_or("");
  ec = {};
  return policy;
}

std::string access_control_policy_body(std::string_view owner_id, std::string_view owner_name) {
  body_writer w("AccessControlPolicy");
  w.owner("Owner", owner_id, owner_name);
  w.open("AccessControlList");
  w.open("Grant");
  // open() writes the name as given: the element's attributes ride along.
  w.open(R"(Grantee xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance" xsi:type="CanonicalUser")");
  w.element("ID", owner_id);
  w.element("DisplayName", owner_name);
  w.close("Grantee");
  w.element("Permission", "FULL_CONTROL");
  w.close("Grant");
  w.close("AccessControlList");
  return std::move(w).finish();
}

std::string get_object_attributes(const object_attributes_page& page) {
  body_writer w("GetObjectAttributesResponse");
  if (page.etag) w.element("ETag", *page.etag);
  if (!page.checksums.empty()) {
    w.open("Checksum");
    for (const auto& [name, value] : page.checksums) {
      if (const auto element = checksum_element(name); !element.empty()) w.element(element, value);
    }
    if (!page.checksum_type.empty()) w.element("ChecksumType", page.checksum_type);
    w.close("Checksum");
  }
  if (page.object_parts) {
    w.open("ObjectParts");
    w.number("PartsCount", page.parts_count);
    w.number("PartNumberMarker", page.part_number_marker);
    w.number("NextPartNumberMarker", page.next_part_number_marker);
    w.number("MaxParts", page.max_parts);
    w.flag("IsTruncated", page.truncated);
    for (const auto& part : page.parts) {
      w.open("Part");
      w.number("PartNumber", part.number);
      w.number("Size", part.size);
      for (const auto& [name, value] : part.checksums) {
        if (const auto element = checksum_element(name); !element.empty()) w.element(element, value);
      }
      w.close("Part");
    }
    w.close("ObjectParts");
  }
  if (page.storage_class) w.element("StorageClass", *page.storage_class);
  if (page.object_size) w.number("ObjectSize", *page.object_size);
  return std::move(w).finish();
}

}  // namespace sluice::s3::xml
