namespace dtrain { int placeholder_agent = 0; }
